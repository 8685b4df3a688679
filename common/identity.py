"""Who is calling, and what they may do: principals with a team and a role, read from an identities file that holds
only the SHA-256 of each token (never a token), reloaded when it changes.

The file is TOML, one table per principal:

    [[identity]]
    principal = "alice"
    team = "vision"
    role = "submitter"          # viewer | submitter | admin
    token_sha256 = "9f86d08..."  # sha256 of the bearer token: printf %s "$TOKEN" | sha256sum

Roles nest: a viewer reads its team's jobs (Get, List, Watch, Fleet); a submitter also submits and cancels them; an
admin sees every team's jobs and runs the fleet (policy, drains, quarantines, the audit log). `--token-file` keeps
working and means one admin. Shared by both services: the planner lets any known identity call it.

The same file may set a team's monthly budget and the fleet's own GPU prices (the executor prices jobs with them):

    [[team]]
    name = "vision"
    monthly_budget_usd = 2000.0
    store = "s3://ml-outputs/vision"   # optional: where its one-node jobs naming no output_uri keep their checkpoints

    [prices]                     # USD per GPU-hour, by GPU class; overrides the catalog's public prices
    "a100-80gb" = 1.10
"""

from __future__ import annotations

import enum
import hashlib
import os
import re
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from common.errors import DeniedError

log = structlog.get_logger("tunefleet.identity")
# How often a call may look whether the identities file changed (a stat, at most once per this many seconds).
RELOAD_CHECK_S = 1.0
# Principal and team names: what an admin types and what logs and the audit show.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_IDENTITIES = 10_000
_EMPTY_TOKEN_SHA256 = hashlib.sha256(b"").hexdigest()


class Role(enum.Enum):
    VIEWER = "viewer"
    SUBMITTER = "submitter"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return list(Role).index(self)


@dataclass(frozen=True)
class Identity:
    principal: str
    team: str
    role: Role

    def require(self, role: Role, what: str) -> None:
        """DeniedError naming the role `what` needs, when this identity's is lower."""
        if self.role.rank < role.rank:
            raise DeniedError(f"{what} needs the {role.value} role; {self.principal} (team {self.team}) is a "
                              f"{self.role.value}: ask an admin of the fleet")

    def sees(self, team: str) -> bool:
        """Whether this identity may see a job of `team` (an admin sees every team's)."""
        return self.role is Role.ADMIN or team == self.team


# A server run without authentication: every caller is the fleet's admin (a laptop, a test, a trusted network).
UNAUTHENTICATED_ADMIN = Identity("anonymous", "default", Role.ADMIN)
TOKEN_FILE_ADMIN = Identity("admin", "default", Role.ADMIN)


# A team's fair-share weight is relative to the others'; bounded so a typo cannot starve every other team.
MAX_WEIGHT = 1000.0
# A quota or borrowing limit larger than any fleet is a typo.
MAX_GPUS = 100_000


class IdentitiesError(ValueError):
    """An identities file that cannot be used; the message names the entry and the field."""


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class TeamPolicy:
    name: str
    monthly_budget_usd: float | None = None  # None: no budget
    weight: float = 1.0  # its share of a GPU class against other teams' (fleet.fairshare)
    quota_gpus: dict[str, int] = field(default_factory=dict)  # GPU class -> GPUs it is guaranteed (nominal quota)
    borrow_gpus: dict[str, int] = field(default_factory=dict)  # GPU class -> most GPUs it may use beyond its quota
    store: str = ""  # where a one-node job of the team that names no output_uri keeps its checkpoints and export


@dataclass(frozen=True)
class Directory:
    """What the file says: who may call (by token hash), each team's policy, the fleet's GPU prices."""

    identities: dict[str, Identity]
    teams: dict[str, TeamPolicy]
    prices_usd_per_gpu_hour: dict[str, float]


def parse_directory(text: str, where: str) -> Directory:
    """The whole file; IdentitiesError naming the entry and field that is wrong."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise IdentitiesError(f"{where} is not TOML: {e}") from None
    unknown = set(document) - {"identity", "team", "prices"}
    if unknown:
        raise IdentitiesError(f"{where} has unknown tables {sorted(unknown)}; it takes [[identity]], [[team]] and "
                              "[prices]")
    return Directory(_identities(document, where), _teams(document, where), _prices(document, where))


def _number(value: object, at: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
        raise IdentitiesError(f"{at} must be a number of dollars from 0 to 1e9, not {value!r}")
    return float(value)


def _teams(document: dict[str, object], where: str) -> dict[str, TeamPolicy]:
    entries = document.get("team", [])
    if not isinstance(entries, list):
        raise IdentitiesError(f"{where}: team must be [[team]] tables")
    teams: dict[str, TeamPolicy] = {}
    for i, entry in enumerate(entries):
        at = f"{where}: team {i + 1}"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or \
                not NAME.fullmatch(entry["name"]):
            raise IdentitiesError(f"{at}: name must be 1-64 letters, digits, '_', '.', '@' or '-'")
        unknown = set(entry) - {"name", "monthly_budget_usd", "weight", "quota_gpus", "borrow_gpus", "store"}
        if unknown:
            raise IdentitiesError(f"{at} ({entry['name']}) has unknown keys {sorted(unknown)}")
        if entry["name"] in teams:
            raise IdentitiesError(f"{at}: team {entry['name']} is listed twice")
        budget = entry.get("monthly_budget_usd")
        weight = entry.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight <= MAX_WEIGHT:
            raise IdentitiesError(f"{at} ({entry['name']}): weight must be a number above 0 and at most "
                                  f"{MAX_WEIGHT:g} (its share against the other teams'), not {weight!r}")
        teams[entry["name"]] = TeamPolicy(entry["name"], None if budget is None else _number(
            budget, f"{at} ({entry['name']}): monthly_budget_usd"), float(weight),
            _gpus_by_class(entry.get("quota_gpus", {}), f"{at} ({entry['name']}): quota_gpus"),
            _gpus_by_class(entry.get("borrow_gpus", {}), f"{at} ({entry['name']}): borrow_gpus"),
            _store(entry.get("store", ""), f"{at} ({entry['name']}): store"))
    return teams


def _store(value: object, at: str) -> str:
    """An object-store prefix (s3://bucket/prefix) with no credentials in it."""
    if value == "":
        return ""
    if not isinstance(value, str) or not re.fullmatch(r"[a-z][a-z0-9+.-]*://[^@\s]+", value):
        raise IdentitiesError(f"{at} must be an object-store prefix such as \"s3://bucket/teams/vision\" (no "
                              f"credentials in it), not {value!r}")
    return value.rstrip("/")


def _gpus_by_class(table: object, at: str) -> dict[str, int]:
    """{GPU class: whole GPUs from 0 to MAX_GPUS}."""
    if not isinstance(table, dict):
        raise IdentitiesError(f"{at} must be a table of GPU class = GPUs, e.g. {{ \"a100-80gb\" = 8 }}")
    for gpu_class, gpus in table.items():
        if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= MAX_GPUS:
            raise IdentitiesError(f"{at}.{gpu_class} must be a whole number of GPUs from 0 to {MAX_GPUS:,}, "
                                  f"not {gpus!r}")
    return {str(k): int(v) for k, v in table.items()}


def _prices(document: dict[str, object], where: str) -> dict[str, float]:
    table = document.get("prices", {})
    if not isinstance(table, dict):
        raise IdentitiesError(f"{where}: prices must be a table of GPU class = USD per GPU-hour")
    return {str(k): _number(v, f"{where}: prices.{k}") for k, v in table.items()}


def parse_identities(text: str, where: str) -> dict[str, Identity]:
    """token SHA-256 -> Identity; IdentitiesError naming the entry and field that is wrong."""
    return parse_directory(text, where).identities


def _identities(document: dict[str, object], where: str) -> dict[str, Identity]:
    entries = document.get("identity", [])
    if not isinstance(entries, list) or not entries:
        raise IdentitiesError(f"{where} lists no [[identity]] tables; each needs principal, team, role and "
                              "token_sha256")
    if len(entries) > MAX_IDENTITIES:
        raise IdentitiesError(f"{where} lists {len(entries):,} identities; at most {MAX_IDENTITIES:,}")
    found: dict[str, Identity] = {}
    principals: set[str] = set()
    for i, entry in enumerate(entries):
        at = f"{where}: identity {i + 1}"
        if not isinstance(entry, dict):
            raise IdentitiesError(f"{at} is not a table")
        unknown = set(entry) - {"principal", "team", "role", "token_sha256"}
        if unknown:
            raise IdentitiesError(f"{at} has unknown keys {sorted(unknown)}; it takes principal, team, role and "
                                  "token_sha256 (the file never holds a token)")
        for key in ("principal", "team"):
            if not isinstance(entry.get(key), str) or not NAME.fullmatch(entry[key]):
                raise IdentitiesError(f"{at}: {key} must be 1-64 letters, digits, '_', '.', '@' or '-'")
        role = entry.get("role")
        if role not in {r.value for r in Role}:
            raise IdentitiesError(f"{at} ({entry['principal']}): role must be viewer, submitter or admin, "
                                  f"not {role!r}")
        digest = entry.get("token_sha256")
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest.lower()):
            raise IdentitiesError(f"{at} ({entry['principal']}): token_sha256 must be 64 hex digits (printf %s "
                                  "\"$TOKEN\" | sha256sum)")
        if digest.lower() == _EMPTY_TOKEN_SHA256:
            raise IdentitiesError(f"{at} ({entry['principal']}): token_sha256 is the hash of an empty token, which "
                                  "would let a call without a token in")
        if entry["principal"] in principals:
            raise IdentitiesError(f"{at}: principal {entry['principal']} is listed twice")
        if digest.lower() in found:
            raise IdentitiesError(f"{at} ({entry['principal']}): the same token as {found[digest.lower()].principal}")
        principals.add(entry["principal"])
        found[digest.lower()] = Identity(entry["principal"], entry["team"], Role(role))
    return found


class Identities:
    """The identities a server accepts, by token hash. From a file, it is read again when the file changes (a
    stat at most every RELOAD_CHECK_S); an edit that does not parse is logged and the last good table kept, so a
    typo never locks every caller out."""

    def __init__(self, directory: Directory, path: Path | None = None,
                 reload_check_s: float = RELOAD_CHECK_S) -> None:
        self._directory = directory
        self._path = path
        self._stamp = self._stat() if path else None
        self._reload_check_s = reload_check_s
        self._checked_at = time.monotonic()
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: Path, reload_check_s: float = RELOAD_CHECK_S) -> Identities:
        """IdentitiesError (naming what is wrong) when the file cannot be read or used."""
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise IdentitiesError(f"{path}: {e}") from None
        return cls(parse_directory(text, str(path)), path, reload_check_s)

    @classmethod
    def single_admin(cls, token: str) -> Identities:
        """`--token-file`: one token, the fleet's admin."""
        if not token:
            raise ValueError("an empty bearer token would let every call in")
        return cls(Directory({token_sha256(token): TOKEN_FILE_ADMIN}, {}, {}))

    def _stat(self) -> tuple[int, int] | None:
        try:
            s = os.stat(self._path)  # type: ignore[arg-type]
        except OSError:
            return None
        return s.st_mtime_ns, s.st_size

    def _reload_if_changed(self) -> None:
        now = time.monotonic()
        if self._path is None or now - self._checked_at < self._reload_check_s:
            return
        with self._lock:
            self._checked_at = now
            stamp = self._stat()
            if stamp == self._stamp or stamp is None:
                return
            self._stamp = stamp
            try:
                self._directory = parse_directory(self._path.read_text(), str(self._path))
                log.info("identities.reloaded", path=str(self._path),
                         identities=len(self._directory.identities), teams=len(self._directory.teams))
            except (OSError, UnicodeDecodeError, IdentitiesError) as e:
                log.error("identities.reload_failed", path=str(self._path), error=str(e),
                          kept=len(self._directory.identities))

    def lookup(self, token: str) -> Identity | None:
        self._reload_if_changed()
        return self._directory.identities.get(token_sha256(token))

    @property
    def directory(self) -> Directory:
        """The file's current content (read again when it changed)."""
        self._reload_if_changed()
        return self._directory

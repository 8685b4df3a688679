"""Which run owns an output directory, so that no job can write into another's files.

A run claims its output directory before it writes anything there, by creating OWNER_FILE (the plan id; on the
fleet the job id is the plan id) with O_EXCL. A directory is claimable only when it
- is not, does not contain and does not lie inside a model folder or dataset the run reads,
- is not an output root or the worker's work dir itself,
- lies inside no other run's output directory (no ancestor holds an OWNER_FILE),
- is new, empty, or already owned by this plan (a rerun of the same job: the only way back in).
A non-empty directory with no owner (a model folder, a home directory, files of unknown origin) is refused:
it may hold another run's output or someone's data, and a run would overwrite it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

from common.bounds import echo
from contract.errors import PlanError
from contract.run_config import RunConfig

OWNER_FILE = ".tunefleet-owner"
FIELD = "output_uri"


def _owner_of(directory: Path) -> str | None:
    try:
        return (directory / OWNER_FILE).read_text(encoding="utf-8", errors="replace").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None


def check_output(out: Path, owner: str, forbidden_roots: Iterable[Path] = (),
                 sources: Iterable[tuple[str, Path]] = ()) -> Path:
    """`out` resolved, when `owner` may write there (see the module's rules); else PlanError naming output_uri.
    Writes nothing (`tunefleet train --check` calls it)."""
    resolved = out.resolve()
    for root in forbidden_roots:
        if resolved == root.resolve():
            raise PlanError(FIELD, f"{echo(str(out))} is the host's output root / work dir ({root}) itself; "
                                   "give the job a directory of its own under it (e.g. runs/<plan id>)")
    for field, source in sources:
        src = source.resolve()
        if resolved == src or src.is_relative_to(resolved) or resolved.is_relative_to(src):
            raise PlanError(FIELD, f"{echo(str(out))} overlaps {field} ({src}), which the run reads; give the "
                                   "job an output directory apart from its model and data")
    for parent in resolved.parents:
        other = _owner_of(parent)
        if other is not None:
            raise PlanError(FIELD, f"{echo(str(out))} lies inside {parent}, the output of another job (its id is "
                                   "not told: it may be another team's); give the job a directory of its own "
                                   "outside every other job's output")
    if resolved.exists() and not resolved.is_dir():
        raise PlanError(FIELD, f"{echo(str(out))} is an existing file, not a directory; name a new directory")
    if resolved.is_dir():
        current = _owner_of(resolved)
        if current is not None and current != owner:
            raise PlanError(FIELD, f"{echo(str(out))} is the output of another job (its id is not told: it may "
                                   f"be another team's); give job {echo(owner)} its own directory (only a rerun of "
                                   "that job may write there)")
        if current is None and _has_entries(resolved):
            raise PlanError(FIELD, f"{echo(str(out))} already holds files that no tunefleet run claimed (e.g. "
                                   f"{_first_entry(resolved)}); give the job a new or empty directory")
    return resolved


def claim_output(out: Path, owner: str, forbidden_roots: Iterable[Path] = (),
                 sources: Iterable[tuple[str, Path]] = ()) -> Path:
    """Check `out` as check_output does, create it and record `owner` there (atomically: of two runs claiming
    one new directory at once, one wins and the other is refused). Returns the resolved directory."""
    resolved = check_output(out, owner, forbidden_roots, sources)
    try:
        resolved.mkdir(parents=True, exist_ok=True)
        fd = os.open(resolved / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        current = _owner_of(resolved)
        if current != owner:
            raise PlanError(FIELD, f"{echo(str(out))} was claimed by another job a moment ago; give job "
                                   f"{echo(owner)} its own directory") from None
        return resolved
    except OSError as e:
        reason = os.strerror(e.errno) if e.errno in (errno.EACCES, errno.EROFS, errno.ENOSPC) else str(e)
        raise PlanError(FIELD, f"{echo(str(out))} cannot be created here: {reason}") from e
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(owner + "\n")
    return resolved


def read_paths(cfg: RunConfig, base: Path) -> list[tuple[str, Path]]:
    """The local files and folders a run reads (model folder, dataset), relative ones resolved against `base`
    (the worker's --work-dir, or the current directory for `tunefleet train`)."""
    named = [("model.weights", cfg.model_path), ("dataset.local_path", cfg.dataset.local_path),
             ("dataset.hub_name", cfg.dataset.hub_name)]
    found = []
    for field, name in named:
        if not name:
            continue
        path = base / Path(name).expanduser()
        if field == "dataset.local_path" or name.startswith(("/", ".", "~")) or path.exists():
            found.append((field, path))
    return found


def _has_entries(directory: Path) -> bool:
    with os.scandir(directory) as entries:
        return any(True for _ in entries)


def _first_entry(directory: Path) -> str:
    with os.scandir(directory) as entries:
        for entry in entries:
            return echo(entry.name)
    return ""

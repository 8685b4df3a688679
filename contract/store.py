"""A job's prefix of a checkpoint store: object storage (s3://bucket/prefix on any S3-compatible endpoint, through
fsspec and s3fs) or a local directory, for a fleet whose hosts share no filesystem. The worker checks it at start
(and names it to each run, STORE_ENV); the run's rank 0 uploads, seals and fetches checkpoints through it
(executor.training.remote, whose docstring has the layout and the sealing rules).

Credentials come from the standard places (the environment, a profile, an instance role: botocore's chain through
s3fs); an endpoint other than AWS's from AWS_ENDPOINT_URL. Neither is ever written to a plan, Redis or an event.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.errors import PlanError, TrainingFailedError

WORKER_STORE_ENV = "TUNEFLEET_CHECKPOINT_STORE"  # a worker's --checkpoint-store
STORE_ENV = "TUNEFLEET_RUN_STORE"  # a run's own prefix of it (<store>[/teams/<team>]/jobs/<job id>), set by its worker
STORE_DEADLINE_ENV = "TUNEFLEET_STORE_DEADLINE_S"  # how long uploads may fail before the run fails (seconds)
STORE_KEEP_ENV = "TUNEFLEET_STORE_KEEP"  # how many sealed checkpoints the store keeps (a worker's --store-keep)
MANIFEST = "manifest.json"  # a checkpoint's seal: each file's size and SHA-256, signed (executor.training.checkpoint)
CHECKPOINTS = "checkpoints"
FINAL = "final"
_SEALED = re.compile(r"step-(\d{8})/f(\d+)/" + re.escape(MANIFEST) + "$")


def filesystem(uri: str, field: str = "checkpoint_store") -> tuple[Any, str]:
    """The fsspec filesystem of `uri` and the path in it; PlanError naming `field` when it cannot be had."""
    try:
        import fsspec
    except ImportError as e:  # the 'store' extra
        raise PlanError(field, f"{uri}: object storage needs fsspec and s3fs; install them with: pip install "
                               "'tunefleet[store]'") from e
    try:
        # each store its own client: a cached one would keep an endpoint and credentials read before
        fs, root = fsspec.core.url_to_fs(uri, skip_instance_cache=True)
    except (ImportError, ValueError) as e:
        raise PlanError(field, f"{uri}: {e}") from e
    return fs, str(root).rstrip("/")


@dataclass(frozen=True)
class Sealed:
    """A sealed checkpoint in the store."""

    step: int
    fence: int
    prefix: str  # its folder in the store's namespace (no scheme)


class Store:
    """One job's prefix of a checkpoint store."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")
        self.fs, self.root = filesystem(self.uri)

    def where(self, path: str) -> str:
        """`path` of the store's namespace as a URI (for messages)."""
        scheme = self.uri.split("://", 1)[0] + "://" if "://" in self.uri else ""
        return f"{scheme}{path}"

    def check(self) -> None:
        """That the store answers and this host may write to it: a clear error naming the URI, before any training."""
        probe = f"{self.root}/.tunefleet-probe-{os.getpid()}"
        try:
            self.fs.pipe_file(probe, b"ok")
            self.fs.rm_file(probe)
        except Exception as e:  # botocore's and the filesystem's errors differ; every one means "cannot use it"
            raise PlanError("checkpoint_store", f"{self.uri} cannot be written ({type(e).__name__}: "
                                                f"{str(e)[:300]}); check the bucket, the endpoint "
                                                "(AWS_ENDPOINT_URL) and this host's credentials") from e

    def _attempt(self, step: int, fence: int) -> str:
        return f"{self.root}/{CHECKPOINTS}/step-{step:08d}/f{fence}"

    def upload(self, local: Path, step: int, fence: int, may_seal: Callable[[], bool]) -> Sealed | None:
        """Copy a locally sealed checkpoint, its manifest last; None when may_seal() says this run may not seal
        (LeaseLostError when another run holds the job)."""
        prefix = self._attempt(step, fence)
        manifest = (local / MANIFEST).read_bytes()
        if self.fs.exists(f"{prefix}/{MANIFEST}"):  # sealed already: its files are never written again
            return self._same_seal(prefix, step, fence, manifest)
        for name in json.loads(manifest)["files"]:
            self.fs.put_file(str(local / name), f"{prefix}/{name}")
        if not may_seal():
            return None
        try:
            self.fs.pipe_file(f"{prefix}/{MANIFEST}", manifest, IfNoneMatch="*")
        except FileExistsError:
            return self._same_seal(prefix, step, fence, manifest)
        except TypeError:  # a filesystem without conditional puts (a local directory): write, then rename
            self.fs.pipe_file(f"{prefix}/.{MANIFEST}", manifest)
            self.fs.mv(f"{prefix}/.{MANIFEST}", f"{prefix}/{MANIFEST}")
        return Sealed(step, fence, prefix)

    def _same_seal(self, prefix: str, step: int, fence: int, manifest: bytes) -> Sealed:
        """An upload retried after its seal landed is done; another checkpoint under the same seal is refused."""
        if self.fs.cat_file(f"{prefix}/{MANIFEST}") != manifest:
            raise TrainingFailedError(f"{self.where(prefix)} is sealed with another manifest; this run's checkpoint "
                                      f"of step {step} was not stored")
        return Sealed(step, fence, prefix)

    def sealed(self) -> list[Sealed]:
        """The sealed checkpoints, oldest first (a step sealed by two claims: the later claim's last)."""
        base = f"{self.root}/{CHECKPOINTS}/"
        found = []
        for path in self.fs.glob(f"{base}step-*/f*/{MANIFEST}"):
            match = _SEALED.search(str(path))
            if match:
                found.append(Sealed(int(match.group(1)), int(match.group(2)),
                                    f"{base}step-{match.group(1)}/f{match.group(2)}"))
        return sorted(found, key=lambda s: (s.step, s.fence))

    def fetch(self, sealed: Sealed, target: Path) -> str:
        """Download a sealed checkpoint into `target` (created): "" when every file its manifest lists arrived with
        the size the manifest records, else why not, naming the object. The files' hashes and the manifest's
        signature are the loader's to check (executor.training.checkpoint.verify), once."""
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        try:
            manifest = self.fs.cat_file(f"{sealed.prefix}/{MANIFEST}")
            files = json.loads(manifest)["files"]
        except (OSError, ValueError, KeyError) as e:
            return f"its manifest {self.where(sealed.prefix)}/{MANIFEST} is unreadable ({e})"
        for name, entry in files.items():
            remote, local = f"{sealed.prefix}/{name}", target / name
            local.parent.mkdir(parents=True, exist_ok=True)
            try:
                self.fs.get_file(remote, str(local))
            except FileNotFoundError:
                return f"{self.where(remote)} is missing"
            if local.stat().st_size != entry.get("bytes"):
                return f"{self.where(remote)} does not match its manifest (its size)"
        (target / MANIFEST).write_bytes(manifest)
        return ""

    def prune(self, keep: int) -> None:
        """Delete what a newer sealed checkpoint makes unnecessary: sealed ones beyond the newest `keep`, and every
        unsealed attempt (a failed upload, a stale holder's) of a step no newer than the newest sealed one."""
        sealed = self.sealed()
        if not sealed:
            return
        kept = {s.prefix for s in sealed[-max(1, keep):]}
        newest = sealed[-1].step
        for attempt in self.fs.glob(f"{self.root}/{CHECKPOINTS}/step-*/f*"):
            match = re.search(r"step-(\d{8})/f(\d+)$", str(attempt))
            if match and str(attempt) not in kept and int(match.group(1)) <= newest:
                self.fs.rm(str(attempt), recursive=True)

    def upload_tree(self, local: Path, name: str) -> int:
        """Copy a folder (the final export) to <prefix>/<name>; returns its bytes."""
        files = [p for p in sorted(local.rglob("*")) if p.is_file()]
        for p in files:
            self.fs.put_file(str(p), f"{self.root}/{name}/{p.relative_to(local)}")
        return sum(p.stat().st_size for p in files)


def worker_store(uri: str) -> Store:
    """A worker's --checkpoint-store, checked: a URI without credentials in it, that this host can write to."""
    if "@" in uri.split("://", 1)[-1].split("/", 1)[0]:
        raise PlanError("checkpoint_store", f"{uri.split('@')[-1]}: put no credentials in the URI; they come from "
                                            "the environment, a profile or the instance role")
    store = Store(uri)
    store.check()
    return store


def job_prefix(uri: str, job_id: str, team: str = "") -> str:
    """A job's prefix of a worker's store: <store>/jobs/<job id>, or under --team-roots <store>/teams/<team>/jobs/…
    (so no team's job reads or overwrites another team's checkpoints)."""
    return f"{uri.rstrip('/')}/{f'teams/{team}/' if team else ''}jobs/{job_id}"


def run_environment(job_store: str, keep: int) -> dict[str, str]:
    """What a worker tells a run of its store: the job's prefix and how many sealed checkpoints to keep."""
    return {STORE_ENV: job_store, STORE_KEEP_ENV: str(keep)} if job_store else {}


def store_from_environment(environ: dict[str, str] | None = None) -> Store | None:
    """The run's store (STORE_ENV), or None for a run without one."""
    uri = (os.environ if environ is None else environ).get(STORE_ENV, "")
    return Store(uri) if uri else None

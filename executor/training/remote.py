"""Checkpoints on object storage, for a fleet whose hosts share no filesystem.

A worker started with --checkpoint-store URI (s3://bucket/prefix on any S3-compatible endpoint, or a local directory)
hands each run its job's own prefix of it (contract.store.STORE_ENV). Rank 0 seals every checkpoint locally as before
(executor.training.checkpoint), then a background thread copies it to the store:

  <job prefix>/checkpoints/step-NNNNNNNN/f<fence>/<every file>     uploaded first
  <job prefix>/checkpoints/step-NNNNNNNN/f<fence>/manifest.json    the seal, written last

An object store has no rename, so the manifest (each file's size and SHA-256, signed with the fleet's checkpoint key)
is the seal: a checkpoint without it is not one. Each claim (fence) uploads under its own prefix, so a stale holder
never overwrites another's files; it cannot seal either: the fleet's fence check (contract.holder) runs before the
manifest is written, and the manifest is put only if none is there (a conditional put), so a seal is never replaced.

Training does not wait for the network: a step waits only when UPLOAD_QUEUE checkpoints already wait. An upload that
fails is retried with backoff; the run fails only once uploads have failed for the store's deadline (STORE_DEADLINE_S).
Only after a newer checkpoint is sealed are older ones deleted (the newest `keep` stay; a failed upload deletes
nothing). A run with no local checkpoint newer than the store's downloads the newest sealed one, verifies every file
against its manifest and resumes from it; a missing or corrupted object falls back to the checkpoint before it.
"""

from __future__ import annotations

import os
import queue
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from common.units import MiB
from contract.errors import LeaseLostError, PlanError, TrainingFailedError
from contract.store import FINAL, STORE_DEADLINE_ENV, STORE_KEEP_ENV, Store
from executor.training import checkpoint

T = TypeVar("T")

# How long uploads may fail in a row before the run fails: what a lost host costs at most beyond the work since its
# last checkpoint while the store is unreachable (README, "Storage").
STORE_DEADLINE_S = 900.0
UPLOAD_QUEUE = 1  # checkpoints that may wait beside the one uploading before a step waits
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0  # upload retry backoff: doubling from the first, capped
STORE_WAIT_REPORTED_S = 0.1  # a step that waited this long for room in the upload queue says so


def newest_into(store: Store, root: Path, key: bytes, local_step: int,
                notice: Callable[[str], None]) -> Path | None:
    """The newest sealed checkpoint of the store newer than `local_step`, downloaded into `root` as step-NNNNNNNN and
    verified (signature and every file's hash); one that fails is skipped for the one before it, with a notice
    naming why. None when the store holds nothing newer that verifies."""
    for sealed in reversed(store.sealed()):
        if sealed.step <= local_step:
            return None
        partial = root / f"{checkpoint.PARTIAL_PREFIX}{sealed.step:08d}.download"
        started = time.monotonic()
        why = store.fetch(sealed, partial) or checkpoint.verify(partial, key)
        if why:
            shutil.rmtree(partial, ignore_errors=True)
            notice(f"checkpoint step {sealed.step} in {store.where(sealed.prefix)} was not used: {why}; trying the "
                   "one before it")
            continue
        final = checkpoint.step_dir(root, sealed.step)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(partial, final)
        size = sum(p.stat().st_size for p in final.rglob("*") if p.is_file())
        notice(f"downloaded checkpoint step {sealed.step} from {store.where(sealed.prefix)} ({size / MiB:.1f} MiB in "
               f"{time.monotonic() - started:.1f} s)")
        return final
    return None


@dataclass(frozen=True)
class Notice:
    """What the uploads did, for the run's progress: a message, and the checkpoint it sealed in the store if any."""

    message: str
    stored_step: int = 0
    stored_uri: str = ""


@dataclass(frozen=True)
class _Upload:
    staged: Path  # hard links to the checkpoint's files: the local retention may delete the checkpoint meanwhile
    step: int
    fence: int
    bytes: int


class Uploader:
    """Rank 0's background uploads: checkpoints in order, each retried until STORE_DEADLINE_S of failures, then
    pruning. The training thread hands checkpoints over (`submit`), reads what happened (`notices`) and stops on a
    failure (`raise_if_failed`)."""

    def __init__(self, store: Store, may_seal: Callable[[], bool], keep: int, deadline_s: float = STORE_DEADLINE_S,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.store, self.may_seal, self.keep, self.deadline_s, self._sleep = store, may_seal, keep, deadline_s, sleep
        self._queue: queue.Queue[_Upload | None] = queue.Queue(maxsize=UPLOAD_QUEUE)
        self._notices: list[Notice] = []
        self._lock = threading.Lock()
        self._failure: Exception | None = None
        self.newest_sealed = 0  # the newest step sealed in the store by this run
        self._thread = threading.Thread(target=self._work, name="checkpoint-upload", daemon=True)
        self._thread.start()

    def submit(self, local: Path, step: int, fence: int) -> float:
        """Queue a sealed local checkpoint for upload; returns the seconds the caller waited for room."""
        self.raise_if_failed()
        staged = local.parent / f".upload-{local.name}.f{fence}"
        shutil.rmtree(staged, ignore_errors=True)
        size = 0
        for p in local.rglob("*"):
            if p.is_file():
                (staged / p.relative_to(local)).parent.mkdir(parents=True, exist_ok=True)
                os.link(p, staged / p.relative_to(local))
                size += p.stat().st_size
        started = time.monotonic()
        self._notice(f"uploading checkpoint step {step} ({size / MiB:.1f} MiB) to {self.store.uri}")
        self._queue.put(_Upload(staged, step, fence, size))
        return time.monotonic() - started

    def notices(self) -> list[Notice]:
        with self._lock:
            taken, self._notices = self._notices, []
        return taken

    def raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    def close(self, timeout_s: float | None = None) -> None:
        """Wait for every queued upload (at most timeout_s), then stop the thread; raises its failure."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout_s)
        self.raise_if_failed()

    def _notice(self, message: str, stored_step: int = 0, stored_uri: str = "") -> None:
        with self._lock:
            self._notices.append(Notice(message, stored_step, stored_uri))

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            if self._failure is not None:
                shutil.rmtree(job.staged, ignore_errors=True)
                continue
            try:
                self._upload(job)
            except Exception as e:
                self._failure = e
            finally:
                shutil.rmtree(job.staged, ignore_errors=True)

    def _upload(self, job: _Upload) -> None:
        started = time.monotonic()
        try:
            sealed = retried(lambda: self.store.upload(job.staged, job.step, job.fence, self.may_seal),
                             lambda e: isinstance(e, LeaseLostError | TrainingFailedError), self.deadline_s,
                             lambda e, wait_s: self._notice(f"storing checkpoint step {job.step} failed "
                                                            f"({type(e).__name__}: {str(e)[:200]}); retrying in "
                                                            f"{wait_s:.0f} s"), self._sleep)
        except (LeaseLostError, TrainingFailedError):
            raise
        except Exception as e:
            raise TrainingFailedError(
                f"checkpoint step {job.step} could not be stored in {self.store.uri} for "
                f"{time.monotonic() - started:.0f} s ({type(e).__name__}: {str(e)[:300]}); the run stops so that a "
                f"lost host costs no more than the work since the last stored checkpoint") from e
        took_s = time.monotonic() - started
        if sealed is None:
            self._notice(f"checkpoint step {job.step} uploaded but not sealed: the fleet could not confirm this run "
                         "still owns the job; the next checkpoint tries again")
            return
        self.newest_sealed = job.step
        uri = self.store.where(sealed.prefix)
        self._notice(f"checkpoint step {job.step} stored and sealed in {uri} ({job.bytes / MiB:.1f} MiB in "
                     f"{took_s:.1f} s)", job.step, uri)
        try:
            self.store.prune(self.keep)
        except Exception as e:  # what is kept is only what the next prune deletes; the run goes on
            self._notice(f"deleting checkpoints older than step {job.step} from {self.store.uri} failed "
                         f"({type(e).__name__}: {str(e)[:200]}); the next sealed checkpoint tries again")


def retried(attempt: Callable[[], T], final: Callable[[Exception], bool], deadline_s: float,
            on_retry: Callable[[Exception, float], None], sleep: Callable[[float], None] = time.sleep) -> T:
    """attempt() until it succeeds, waiting RETRY_FIRST_S after the first failure, doubling up to RETRY_MAX_S; a
    failure `final` says no retry helps, or one after deadline_s of failures, is raised. Each retry is announced
    first: on_retry(the failure, the seconds it waits)."""
    started, wait_s = time.monotonic(), RETRY_FIRST_S
    while True:
        try:
            return attempt()
        except Exception as e:
            failing_s = time.monotonic() - started
            if final(e) or failing_s >= deadline_s:
                raise
            on_retry(e, wait_s)
            sleep(min(wait_s, max(0.0, deadline_s - failing_s)))
            wait_s = min(wait_s * 2, RETRY_MAX_S)


def wait_for_store(store: Store, deadline_s: float, notice: Callable[[str], None],
                   sleep: Callable[[float], None] = time.sleep) -> None:
    """Store.check, tried again with backoff while the store cannot be reached (an outage must not fail the job that
    starts meanwhile), for at most deadline_s; a missing bucket or credentials it refuses fail at once."""
    retried(store.check,
            lambda e: not isinstance(e, PlanError) or isinstance(e.__cause__, FileNotFoundError | PermissionError),
            deadline_s, lambda e, wait_s: notice(f"{store.uri} cannot be reached ({type(e.__cause__).__name__}); "
                                                 f"trying again in {wait_s:.0f} s (for at most {deadline_s:.0f} s)"),
            sleep)


def deadline_from_environment(environ: dict[str, str] | None = None) -> float:
    value = (os.environ if environ is None else environ).get(STORE_DEADLINE_ENV, "")
    return float(value) if value else STORE_DEADLINE_S


def keep_from_environment(default: int, environ: dict[str, str] | None = None) -> int:
    """The sealed checkpoints the store keeps: the worker's --store-keep, else the run's local retention."""
    value = (os.environ if environ is None else environ).get(STORE_KEEP_ENV, "")
    return max(1, int(value)) if value else default


class RunStore:
    """A run's side of its store, as the trainer calls it: checked before the model loads, the newest checkpoint
    fetched before resuming, each sealed checkpoint handed to rank 0's uploads, their notices reported as progress,
    all of them waited for before the run ends, and the export stored. Ranks other than 0 only wait for rank 0."""

    def __init__(self, store: Store, rank: int, keep: int, may_seal: Callable[[], bool],
                 report: Callable[[int, Notice], None]) -> None:
        self.store, self.rank, self.keep, self.may_seal, self.report = store, rank, keep, may_seal, report
        self.uploader: Uploader | None = None

    def check(self) -> None:
        if self.rank == 0:  # a wrong bucket or credentials: refused before the model loads; an outage: waited out
            wait_for_store(self.store, deadline_from_environment(), lambda message: self.report(0, Notice(message)))

    def fetch_newer(self, root: Path, decide: Callable[[bool], bool]) -> None:
        """Rank 0 downloads the store's newest sealed checkpoint when it is newer than this host's (the job ran
        elsewhere); the others wait for it (`decide`: rank 0's value on every rank), then every rank reads the same
        local directory (one node; a multi-node run keeps its shards on storage every node mounts)."""
        if self.rank == 0:
            found = checkpoint.latest(root)
            newest_into(self.store, root, checkpoint.signing_key(), found[0].step if found else 0,
                        lambda message: self.report(0, Notice(message)))
        decide(True)

    def start_uploads(self) -> None:
        if self.rank == 0:
            self.uploader = Uploader(self.store, self.may_seal, self.keep, deadline_from_environment())

    def submit(self, path: Path, step: int, fence: int) -> None:
        """Hand a sealed local checkpoint to the uploads; a step that waited for room says so."""
        if self.uploader is None:
            return
        waited_s = self.uploader.submit(path, step, fence)
        self.notices(step)
        if waited_s >= STORE_WAIT_REPORTED_S:
            self.report(step, Notice(f"training waited {waited_s:.1f} s for the upload of the checkpoint before it"))

    def notices(self, step: int) -> None:
        """What the uploads did since the last step, as progress; their failure stops the run."""
        if self.uploader is not None:
            for notice in self.uploader.notices():
                self.report(step, notice)
            self.uploader.raise_if_failed()

    def finish(self, step: int) -> None:
        """Wait until every checkpoint handed over is stored (or the store's deadline failed it)."""
        if self.uploader is not None:
            try:
                self.uploader.close()
            finally:
                self.notices(step)

    def store_export(self, final: Path) -> None:
        started = time.monotonic()
        stored = self.store.upload_tree(final, FINAL)
        self.report(0, Notice(f"stored the export in {self.store.uri}/{FINAL} ({stored / MiB:.1f} MiB in "
                              f"{time.monotonic() - started:.1f} s)"))

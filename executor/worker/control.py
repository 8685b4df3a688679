"""What the worker checks while it holds a job: its lease (renewed when due; lost, or unconfirmable for too long,
stops the run) and what has been asked of the job (Cancel, a stop for its team's budget, the worker's own drain,
preemption, the timeout)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis
import structlog
from tunefleet.v1 import progress_pb2

from contract.errors import LeaseLostError
from executor.worker.publisher import Publisher
from executor.worker.supervision import Finished, LeaseLost, Outcome, Requeue, Stop
from fleet import queues
from fleet.jobs import JobStore, now_ms
from fleet.leases import RENEW_INTERVAL_S, Leases, self_fence_after_s
from fleet.ordering import RECLAIM

log = structlog.get_logger("executor.worker.control")


@dataclass
class Held:
    """The job this worker runs now, its lease, and (once its output directory is known) its event publisher."""

    job_id: str
    fence: int
    renewed_at: float  # monotonic time of the last successful renewal
    publisher: Publisher | None = None

    @property
    def events(self) -> Publisher:
        assert self.publisher is not None, "the publisher starts with the job's output directory"
        return self.publisher


@dataclass
class JobControl:
    store: JobStore
    leases: Leases
    host_id: str
    lease_ttl_s: float
    stopping: threading.Event  # this worker is shutting down
    quarantined: Callable[[], str | None] = lambda: None  # why this host takes no work (its GPUs' health)

    def keep_lease(self, held: Held) -> LeaseLost | None:
        """Renew the lease when due. LeaseLost when the job is no longer this worker's to run:
        another host holds it, or Redis could not be reached for so long that the lease may have expired."""
        now = time.monotonic()
        if now - held.renewed_at < RENEW_INTERVAL_S:
            return None
        try:
            if self.leases.renew(held.job_id, self.host_id, held.fence):
                held.renewed_at = now
                return None
            why = "its lease expired and the job moved to another host"
        except redis.RedisError as e:
            if now - held.renewed_at < self_fence_after_s(self.lease_ttl_s):
                log.warning("job.lease_renew_failed", error=str(e))
                return None
            why = (f"it could not renew its lease for {now - held.renewed_at:.0f} s ({e}); the lease may expire "
                   "and the job move")
        log.warning("job.lease_lost", why=why)
        return LeaseLost(f"host {self.host_id} stopped the run: {why}")

    def held_back(self, held: Held, deadline: float, timeout_s: int, out: Path) -> Outcome | None:
        """What ends a held job that runs nothing yet (a gang forming): its lease lost, else a stop's outcome."""
        if (lost := self.keep_lease(held)) is not None:
            return lost
        stop = self.stop_reason(held.job_id, deadline, timeout_s, out)
        return stop.outcome if stop else None

    def stop_reason(self, job_id: str, deadline: float, timeout_s: int, out: Path) -> Stop | None:
        try:
            asked = self.store.stop_requests(job_id)
        except redis.RedisError as e:
            log.warning("job.stop_requests_unreadable", error=str(e))
            return None
        if asked.cancel_reason is not None:
            why = asked.cancel_reason
            return Stop(Finished(progress_pb2.PHASE_CANCELLED,
                                 f"cancelled{': ' + why if why else ''}; {what_is_kept(out)}"))
        if asked.budget_stop:
            return Stop(Finished(progress_pb2.PHASE_CANCELLED, asked.budget_stop), checkpoint_first=True)
        if (sick := self.quarantined()) is not None:
            return Stop(Requeue(f"host {self.host_id} is quarantined ({sick}); requeued to resume from its last "
                                "checkpoint on a healthy host"), checkpoint_first=True)
        if self.stopping.is_set():
            return Stop(Requeue(f"host {self.host_id} is shutting down; requeued to resume from its last checkpoint"),
                        checkpoint_first=True)
        if asked.preempted_for is not None:
            within_s = max(0.0, (asked.preempt_deadline_ms - now_ms()) / 1000) if asked.preempt_deadline_ms else None
            by = f" within {within_s:.0f} s" if within_s is not None else ""
            why = f"reclaimed for {asked.preempted_for}, within its team's quota (this job's team borrows beyond " \
                  "its own)" if asked.yield_kind == RECLAIM else f"preempted for {asked.preempted_for}"
            return Stop(Requeue(f"{why}: asked to checkpoint now{by}; requeued to resume from its checkpoint"),
                        checkpoint_first=True, checkpoint_within_s=within_s)
        if time.monotonic() > deadline:
            return Stop(Finished(progress_pb2.PHASE_FAILED,
                                 f"ran past its timeout of {timeout_s} s (predicted duration × "
                                 f"{queues.JOB_TIMEOUT_MARGIN:g} + {queues.JOB_TIMEOUT_STARTUP_S} s); "
                                 f"{what_is_kept(out)}"))
        return None


def what_is_kept(out: Path) -> str:
    """What a stopped run leaves to resume from, in words."""
    checkpoints = out / "checkpoints"
    if checkpoints.is_dir() and any(p.is_dir() and p.name.startswith("step-") for p in checkpoints.iterdir()):
        return f"checkpoints kept in {checkpoints}"
    return "no checkpoint had been written (a rerun starts from step 0)"


def adopt_hand_back(held: Held) -> None:
    """The fleet's event of a job this worker gave back, into the file too, unless another host took the job
    meanwhile (that host's worker adopts it)."""
    try:
        held.events.adopt()
    except LeaseLostError:
        log.info("job.taken_before_adopting", job_id=held.job_id)

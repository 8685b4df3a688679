"""Why a queued job waits, where it stands, and when it is expected to start — from one reading of the fleet.

The place and reason come from the queues and hosts; the expected start replays the class's hosts and the jobs
ahead of it in queue order (fleet.eta), with each job's predicted duration as Submit stored it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf import timestamp_pb2
from tunefleet.v1 import executor_pb2, progress_pb2

from fleet import queues
from fleet.eta import NOW, Schedule, Span, Start, remaining
from fleet.jobs import now_ms
from fleet.recovery import GANG_WAIT, FleetPolicy

# What a queued job's place and expected start read of its record (the queue first: every record has it).
PLACE_FIELDS = ("queue", "gpu_class", "retry_at_ms", "retry_kind", "retry_reason", "infra_failures", "team",
                "predicted_s", "predicted_low_s", "predicted_high_s", "nodes")
# What a running job's remaining time reads of its record.
RUNNING_FIELDS = ("started_at_ms", "last_event", "predicted_s", "predicted_low_s", "predicted_high_s")


def predicted(record: dict[bytes, bytes]) -> Span | None:
    """The job's predicted duration as Submit stored it; None for a plan without a prediction."""
    mid = float(record.get(b"predicted_s") or 0)
    if mid <= 0:
        return None
    return Span(mid, float(record.get(b"predicted_low_s") or mid), float(record.get(b"predicted_high_s") or mid))


def nodes_of(record: dict[bytes, bytes]) -> int:
    return max(1, int(record.get(b"nodes") or 1))


def free_in(host: executor_pb2.Host, running: dict[str, dict[bytes, bytes]], at_ms: int) -> Span:
    """How long until the host is free: now when idle, else its running job's remaining time."""
    record = running.get(host.running_job_id) if host.running_job_id else None
    if not record:
        return NOW
    last = progress_pb2.ProgressEvent.FromString(record.get(b"last_event", b""))
    started_ms = int(record.get(b"started_at_ms") or at_ms)
    return remaining(predicted(record), max(0, at_ms - started_ms) / 1000, last.eta_s)


def schedule(hosts: list[executor_pb2.Host], gpu_class: str, running: dict[str, dict[bytes, bytes]],
             at_ms: int) -> Schedule:
    """The replay of a class: its healthy hosts and when each is free."""
    return Schedule([free_in(h, running, at_ms) for h in hosts
                     if h.gpu_class == gpu_class and not h.quarantine_reason])


def set_expected_start(start: Start | None, at_ms: int, out: executor_pb2.Job | executor_pb2.PendingJob) -> None:
    if start is None:
        return
    for name, seconds in (("expected_start", start.in_s.mid_s), ("expected_start_earliest", start.in_s.low_s),
                          ("expected_start_latest", start.in_s.high_s)):
        stamp = timestamp_pb2.Timestamp()
        stamp.FromMilliseconds(at_ms + int(seconds * 1000))
        getattr(out, name).CopyFrom(stamp)
    out.expected_start_is_lower_bound = start.lower_bound


@dataclass(frozen=True)
class Waiting:
    reason: str
    position: int  # 1 = next on its class; 0 = not in a queue (retry backoff, being claimed)


@dataclass(frozen=True)
class WaitingLine:
    """Why queued jobs wait and where they stand, from one reading of the fleet."""

    hosts: list[executor_pb2.Host]
    policy: FleetPolicy
    depth: Callable[[str], int]  # jobs waiting in a queue
    yielding: dict[str, str]  # waiting job id -> the running job asked to yield its host to it
    index_of: Callable[[str, str], int | None]  # a job's index in its queue, when the caller does not know it
    # why a job waits for its team's limit on GPUs (queue, job id, team), or "" when it does not
    limit_reason: Callable[[str, str, str], str] = lambda queue, job_id, team: ""
    at_ms: int = field(default_factory=now_ms)

    def place(self, job_id: str, record: dict[bytes, bytes], index: int | None = None) -> Waiting:
        retry_at_ms = int(record.get(b"retry_at_ms") or 0)
        wait_s = max(retry_at_ms - now_ms(), 0) / 1000
        if retry_at_ms and record.get(b"retry_kind", b"").decode() == GANG_WAIT:
            return Waiting(f"{record.get(b'retry_reason', b'').decode()}; its gang tries to form again in "
                           f"{wait_s:.0f} s", 0)
        if retry_at_ms:
            return Waiting(f"retry {int(record.get(b'infra_failures') or 0)} of {self.policy.retry_limit} after "
                           f"{record.get(b'retry_reason', b'').decode()}; back in its queue in "
                           f"{wait_s:.0f} s", 0)
        queue = record[b"queue"].decode()
        parsed = queues.parse_queue_name(queue)
        if index is None:
            index = self.index_of(queue, job_id)
        if parsed is None or index is None:
            return Waiting("being handed to a worker", 0)
        gpu_class, priority = parsed
        # a worker takes its class's higher tiers first: their jobs are ahead of this queue's
        ahead = index + sum(self.depth(queues.queue_name(gpu_class, p)) for p in queues.TIERS if p < priority)
        limited = self.limit_reason(queue, job_id, record.get(b"team", b"").decode())
        return Waiting(limited or self._reason(job_id, gpu_class, ahead), ahead + 1)

    def _reason(self, job_id: str, gpu_class: str, ahead: int) -> str:
        of_class = [h for h in self.hosts if h.gpu_class == gpu_class]
        if not of_class:
            return f"no registered host has {gpu_class}; start 'tunefleet worker' on one (or re-plan for a class " \
                   f"the fleet has: {', '.join(sorted({h.gpu_class for h in self.hosts})) or 'none registered'})"
        sick = [h for h in of_class if h.quarantine_reason]
        if len(sick) == len(of_class):
            why = "; ".join(f"{h.host_id}: {h.quarantine_reason}" for h in sick[:3])
            return f"every {gpu_class} host is quarantined ({why}); once one is repaired, 'tunefleet host clear " \
                   "HOST' lets it take work"
        of_class = [h for h in of_class if not h.quarantine_reason]
        busy = [h.running_job_id for h in of_class if h.running_job_id]
        if len(busy) == len(of_class):
            if job_id in self.yielding:
                return f"waiting for job {self.yielding[job_id]} to checkpoint and yield its host (preemption)"
            return f"all {len(of_class)} {gpu_class} host(s) are busy ({', '.join(busy)}); {ahead} job(s) ahead of it"
        if ahead:
            return f"{ahead} job(s) of {gpu_class} ahead of it (its queue and higher tiers)"
        return "next in its queue; a free host picks it up within seconds"

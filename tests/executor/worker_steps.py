"""What a fleet worker does with a queued job, for the tests that play a worker's part without running one: rq's
dequeue takes the job off its queue, then the worker claims it (fleet.leases). The one place tests stand in for rq's
dequeue."""

from __future__ import annotations

import redis
from rq import Queue
from tunefleet.v1 import progress_pb2

from fleet.jobs import JobStore, now_ms
from fleet.leases import Leases


def dequeue(fleet: redis.Redis, job_id: str, queue: str | None = None) -> None:
    """rq's dequeue of this job by a worker: off its queue (the job record's, unless named)."""
    name = queue or JobStore(fleet).record(job_id).queue
    assert Queue(name, connection=fleet).remove(job_id), f"{job_id} was not waiting in {name}"


def take(fleet: redis.Redis, job_id: str, host: str, leases: Leases | None = None) -> int:
    """Dequeue the job and claim it as `host`: the new fence."""
    dequeue(fleet, job_id)
    fence = (leases or Leases(fleet)).claim(job_id, host, now_ms(), progress_pb2.PHASE_QUEUED,
                                            progress_pb2.PHASE_LOADING)
    assert isinstance(fence, int), fence
    return fence

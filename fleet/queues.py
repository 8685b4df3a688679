"""The fleet's queues on rq — the only module that imports rq.

One queue per GPU class and priority tier, `tunefleet.<gpu_class>.<tier>`; a worker listens on its class's
queues in tier order (high, normal, low), so a higher tier is always taken first. rq jobs use the JSON
serializer and carry only the job id: the plan itself is protobuf bytes in the job record (fleet.jobs),
never a pickle. The rq job id is the plan id, so a plan is queued at most once.

What rq does, through its public API (Queue, Job, StartedJobRegistry, SimpleWorker): the queues' lists and its job
records, a queue's write inside a caller's transaction (rq takes a pipeline for enqueue and remove: Submit and Cancel
stay atomic with the job record), the worker's loop, heartbeat, signals and its own maintenance.

What the fleet adds, each in one named place of this module:
- **Dequeue order** (FleetWorker): before each dequeue, the worker asks the fleet's start order (fleet.fairshare)
  which of its class's queues may give a job now and in what order, and waits — as a suspended rq worker does, with
  heartbeats — while none may or while its host is quarantined. rq 3 exposes dequeue order only through its Worker's
  `reorder_queues` hook, which it calls after a dequeue and which its own RoundRobinWorker and RandomWorker implement by
  setting the worker's `_ordered_queues`; FleetWorker sets that list the same way, before the dequeue instead of after
  it (tests/executor/test_fleet_worker.py pins rq's behaviour: a dequeue takes from that list, in its order).
- **The head of a queue** (JobQueues.move_to_front): the start order's head moved to the front of its rq list in one
  conditional step (LREM then LPUSH, only of an id still there), the only write to rq's lists outside rq.
- **A lost host's execution** (JobQueues.forget_execution): removed from rq's started registry through its public
  remove_executions, in the sweep's transaction that requeues the job. The fleet, not rq, decides what becomes of a
  lost host's job (back in its queue from its last checkpoint, after a backoff: fleet.recovery); rq's maintenance would
  otherwise mark it failed while another host runs it.
- Job state beyond queued/started/finished (leases, fences, retries, gangs: fleet.leases, fleet.recovery): rq's job
  record has no place for a fencing token, and its own retry re-runs a job without a checkpoint.
"""

from __future__ import annotations

import math
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from rq import Queue, SimpleWorker
from rq.exceptions import NoSuchJobError, StopRequested
from rq.job import Job
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer
from rq.worker import WorkerStatus
from tunefleet.v1 import executor_pb2

QUEUE_PREFIX = "tunefleet."
TIERS = {executor_pb2.PRIORITY_HIGH: "high", executor_pb2.PRIORITY_NORMAL: "normal",
         executor_pb2.PRIORITY_LOW: "low"}
TIER_PRIORITY = {tier: priority for priority, tier in TIERS.items()}
JOB_FUNCTION = "executor.worker.runtime.execute"
MEMBER_FUNCTION = "executor.worker.runtime.join_gang"  # a member ticket of a multi-node job's gang (fleet.gangs)
# rq's default job timeout (180 s) would kill every real training job. A job may run for its predicted
# duration × JOB_TIMEOUT_MARGIN plus JOB_TIMEOUT_STARTUP_S (model download and load, data tokenization);
# the planner's upper bound is already ~1.3× its estimate, so 3× leaves room for slow hosts and resumes.
JOB_TIMEOUT_MARGIN = 3.0
JOB_TIMEOUT_STARTUP_S = 1800
# A plan without a time prediction (written by hand) may run a week before the fleet stops it.
DEFAULT_JOB_TIMEOUT_S = 7 * 24 * 3600
# rq's own timeout is a backstop behind the worker's, which stops the run cleanly and records why.
RQ_TIMEOUT_GRACE_S = 300
# Keep rq's record of a finished job this long (ours lives in the job record).
RQ_RESULT_TTL_S = 24 * 3600
# How often a paused (quarantined) worker looks again whether it may take work, heartbeating rq meanwhile.
PAUSED_POLL_S = 1.0


def job_timeout_s(predicted_duration_s: float) -> int:
    """predicted × JOB_TIMEOUT_MARGIN + JOB_TIMEOUT_STARTUP_S, or DEFAULT_JOB_TIMEOUT_S without a prediction."""
    if not predicted_duration_s > 0 or not math.isfinite(predicted_duration_s):
        return DEFAULT_JOB_TIMEOUT_S
    return min(int(predicted_duration_s * JOB_TIMEOUT_MARGIN) + JOB_TIMEOUT_STARTUP_S, 365 * 24 * 3600)


def tier_of(priority: int) -> int:
    """A priority's place among the tiers (TIERS), 0 the highest; a priority of no tier counts as the lowest."""
    return list(TIERS).index(priority) if priority in TIERS else len(TIERS) - 1


@dataclass(frozen=True)
class QueueRef:
    """One of the fleet's queues: a GPU class and a priority tier (executor_pb2.Priority); rq knows it by `name`,
    'tunefleet.<gpu_class>.<tier>', which only this class writes and reads back."""

    gpu_class: str
    priority: int

    @property
    def name(self) -> str:
        return f"{QUEUE_PREFIX}{self.gpu_class}.{TIERS[self.priority]}"

    @property
    def tier(self) -> int:
        """Its place among the tiers, 0 the highest (a worker takes a lower place first)."""
        return tier_of(self.priority)

    @classmethod
    def of_class(cls, gpu_class: str) -> list[QueueRef]:
        """A class's queues, highest tier first: the order its workers listen in."""
        return [cls(gpu_class, priority) for priority in TIERS]

    @classmethod
    def parse(cls, name: str) -> QueueRef | None:
        """'tunefleet.a100-80gb.high' -> QueueRef('a100-80gb', PRIORITY_HIGH); None for a queue that is not ours."""
        if not name.startswith(QUEUE_PREFIX):
            return None
        gpu_class, _, tier = name.removeprefix(QUEUE_PREFIX).rpartition(".")
        if not gpu_class or tier not in TIER_PRIORITY:
            return None
        return cls(gpu_class, TIER_PRIORITY[tier])


# Remove each job id from a queue's list and, only if it was there, push it at the front (LPUSH: rq's at_front);
# the ids come last-first, so the first ends up in front.
_MOVE_TO_FRONT = """
local moved = 0
for _, id in ipairs(ARGV) do
  if redis.call('LREM', KEYS[1], 1, id) == 1 then
    redis.call('LPUSH', KEYS[1], id)
    moved = moved + 1
  end
end
return moved
"""


class JobQueues:
    def __init__(self, connection: redis.Redis) -> None:
        self.redis: Any = connection  # redis-py's stubs type replies as unions of every RESP type
        self._move_to_front = self.redis.register_script(_MOVE_TO_FRONT)
        # One rq Queue per name, kept: rq caches the server's version on it (get_job_position asks for it).
        # The names are the fleet's classes x 3 tiers (validated plans), so this stays small.
        self._queues: dict[str, Queue] = {}

    def _queue(self, name: str) -> Queue:
        if name not in self._queues:
            self._queues[name] = Queue(name, connection=self.redis, serializer=JSONSerializer)
        return self._queues[name]

    def enqueue(self, job_id: str, queue: str, timeout_s: int, pipeline: Any = None, at_front: bool = False) -> None:
        """Queue the job (inside the caller's transaction when a pipeline is given)."""
        self._queue(queue).enqueue_call(JOB_FUNCTION, args=[job_id], job_id=job_id,
                                        timeout=timeout_s + RQ_TIMEOUT_GRACE_S, result_ttl=RQ_RESULT_TTL_S,
                                        failure_ttl=RQ_RESULT_TTL_S, description=f"tunefleet job {job_id}",
                                        pipeline=pipeline, at_front=at_front)

    def enqueue_member(self, ticket_id: str, job_id: str, fence: int, node_rank: int, queue: str,
                       timeout_s: int) -> None:
        """A gang's member ticket, at the front of the job's queue (fleet.gangs says why)."""
        self._queue(queue).enqueue_call(MEMBER_FUNCTION, args=[job_id, fence, node_rank], job_id=ticket_id,
                                        timeout=timeout_s + RQ_TIMEOUT_GRACE_S, result_ttl=RQ_RESULT_TTL_S,
                                        failure_ttl=RQ_RESULT_TTL_S,
                                        description=f"tunefleet job {job_id}: node {node_rank} of its gang",
                                        at_front=True)

    def remove(self, job_id: str, queue: str, pipeline: Any = None) -> None:
        """Take a queued job out of its queue (Cancel before it started), inside the caller's transaction when a
        pipeline is given."""
        self._queue(queue).remove(job_id, pipeline=pipeline)
        self._delete_job(job_id, pipeline)

    def withdraw(self, job_id: str, queue: str) -> bool:
        """Take a job out of its queue if no worker has taken it yet (True when it was still waiting)."""
        if not self._queue(queue).remove(job_id):
            return False
        self._delete_job(job_id)
        return True

    def _delete_job(self, job_id: str, pipeline: Any = None) -> None:
        """rq's record of a job no worker will run (the fleet's own record keeps its history)."""
        try:
            job = Job.fetch(job_id, connection=self.redis, serializer=JSONSerializer)
        except NoSuchJobError:
            return
        job.delete(pipeline=pipeline, remove_from_queue=False)

    def forget_execution(self, job_id: str, queue: str, pipeline: Any = None) -> None:
        """Drop a lost host's execution of the job from rq's started registry (inside the caller's transaction),
        so rq's own clean-up never marks the job failed while another host runs it."""
        try:
            job = Job.fetch(job_id, connection=self.redis, serializer=JSONSerializer)
        except NoSuchJobError:
            return
        StartedJobRegistry(queue, connection=self.redis, serializer=JSONSerializer).remove_executions(
            job, pipeline=pipeline)

    def depths(self) -> dict[str, int]:
        """Jobs waiting in each of the fleet's queues."""
        fleet_queues = sorted((q for q in Queue.all(connection=self.redis, serializer=JSONSerializer)
                               if QueueRef.parse(q.name)), key=lambda q: q.name)
        return {q.name: q.count for q in fleet_queues}

    def depth(self, queue: str) -> int:
        return self._queue(queue).count

    def queued_ids(self, queue: str, limit: int = -1) -> list[str]:
        """The ids waiting in a queue, next first (at most `limit`; -1 for all)."""
        return self._queue(queue).get_job_ids(0, limit)

    def position(self, job_id: str, queue: str) -> int | None:
        """0-based place of a job in its queue, or None when it is not there."""
        return self._queue(queue).get_job_position(job_id)

    def move_to_front(self, job_ids: list[str], queue: str) -> int:
        """Move waiting jobs to the front of their queue, in the order given (the start order's head, for the
        dequeues that follow — its own and other workers'), in one atomic step that pushes a job back only if it
        removed it: a job another worker popped meanwhile is never pushed again. rq has no "move" of its own: this is
        its remove and push_job_id(at_front=True) made conditional, on the list its public Queue.key names. How many
        moved."""
        return int(self._move_to_front(keys=[self._queue(queue).key], args=list(reversed(job_ids))))


class FleetWorker(SimpleWorker):
    """rq's SimpleWorker (a job runs in the worker's process: it only supervises a training process tree) with the
    fleet's dequeue (module docstring): `paused()` (a quarantined host) takes nothing; `before_dequeue()` returns the
    queues a dequeue may take from now, in the order to try them (None: all, in their order; []: none for now).
    SIGTERM/SIGINT call `on_shutdown`, so the running job can stop its tree and requeue; rq then exits after it."""

    def __init__(self, queues: list[Queue], name: str, connection: redis.Redis, on_shutdown: Callable[[], None],
                 paused: Callable[[], bool], before_dequeue: Callable[[], list[str] | None], burst: bool) -> None:
        super().__init__(queues, name=name, connection=connection, serializer=JSONSerializer)
        self.shutdown = threading.Event()
        self.on_shutdown, self.paused, self.before_dequeue = on_shutdown, paused, before_dequeue
        self.burst = burst  # as work() is told: a burst worker stops when it may take nothing

    def handle_warm_shutdown_request(self) -> None:
        super().handle_warm_shutdown_request()
        self.shutdown.set()
        self.on_shutdown()

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None) -> Any:
        self._order(self._wait_for_takeable())
        return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)

    def _wait_for_takeable(self) -> list[str] | None:
        """The queues the next dequeue may take from, once there are any; StopRequested on shutdown, or at once in a
        burst (as rq's suspension ends a burst worker)."""
        while not self.shutdown.is_set():
            if not self.paused():
                takeable = self.before_dequeue()
                if takeable is None or takeable:
                    return takeable
            if self.burst:
                break
            before = self.get_state()
            self.set_state(WorkerStatus.SUSPENDED)
            self.shutdown.wait(PAUSED_POLL_S)
            self.heartbeat()
            self.set_state(before)
        raise StopRequested

    def _order(self, takeable: list[str] | None) -> None:
        """The dequeue's queues, as rq's own dequeue strategies set them (module docstring)."""
        by_name = {q.name: q for q in self.queues}
        self._ordered_queues = list(self.queues) if takeable is None else \
            [by_name[name] for name in takeable if name in by_name]


def work(connection: redis.Redis, queues: list[str], name: str, on_shutdown: Callable[[], None],
         paused: Callable[[], bool] = lambda: False, burst: bool = False,
         before_dequeue: Callable[[], list[str] | None] = lambda: None) -> None:
    """Run a FleetWorker on `queues` (in order) in this process until it is told to stop (burst: until nothing is
    left that it may take)."""
    # rq refuses a name whose previous worker has not expired (up to 420 s): a container restarted after a crash
    # keeps its host id, so rq's name gets a per-process suffix.
    worker = FleetWorker([Queue(q, connection=connection, serializer=JSONSerializer) for q in queues],
                         f"{name}.{secrets.token_hex(4)}", connection, on_shutdown, paused, before_dequeue, burst)
    worker.work(burst=burst, logging_level="WARNING")

"""The client-side transitions of a job record, each one Redis transaction: Submit (record, index, first event
and rq enqueue together) and Cancel (a queued job leaves its queue and ends; a running one is asked to stop).
The holder-side transitions (claim, release, requeue) are in fleet.leases and fleet.recovery."""

from __future__ import annotations

from typing import Any

import redis
from tunefleet.v1 import executor_pb2, progress_pb2

from contract.errors import PlanError
from contract.progress import TERMINAL_PHASES, new_event
from fleet import queues
from fleet.errors import QueueFullError
from fleet.events import EventLog
from fleet.jobs import RUNNING_PHASES, JobStore, NewJob, now_ms
from fleet.keys import JOBS_INDEX, job_key, submitter_key


class Lifecycle:
    def __init__(self, connection: redis.Redis) -> None:
        self.redis: Any = connection  # redis-py's stubs type replies as unions of every RESP type
        self.store = JobStore(connection)
        self.events = EventLog(connection)
        self.queues = queues.JobQueues(connection)

    def submit(self, new: NewJob, max_queued: int = 0) -> tuple[executor_pb2.Job, bool]:
        """Create the job and queue it; (the job, True). The same plan again: (the existing job, False);
        PlanError when its id is taken by another plan; QueueFullError when its submitter already has
        `max_queued` jobs waiting (0: no cap). Concurrent Submits of one caller may pass the cap by as many
        calls as run at once (the count is read before the transaction)."""
        plan = new.plan
        key = job_key(plan.plan_id)
        if max_queued and not self.redis.exists(key):
            waiting = self.waiting_of(new.submitter, max_queued)
            if waiting >= max_queued:
                raise QueueFullError(f"{new.submitter or 'this caller'} already has {waiting:,} jobs waiting in "
                                     f"the fleet, the most one caller may queue (--max-queued-per-caller "
                                     f"{max_queued:,}); wait for some to start, or cancel queued ones")
        while True:
            with self.redis.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(key)
                    if pipe.exists(key):
                        pipe.reset()
                        existing = self.store.get(plan.plan_id)
                        if existing.plan.SerializeToString(deterministic=True) != plan.SerializeToString(
                                deterministic=True):
                            raise PlanError("plan.plan_id", f"job {plan.plan_id} already exists with a different "
                                                            "plan; give this plan a new plan_id")
                        return existing, False
                    submitted = now_ms()
                    pipe.multi()
                    pipe.hset(key, mapping=new.fields(submitted))
                    pipe.zadd(JOBS_INDEX, {plan.plan_id: submitted})
                    pipe.sadd(submitter_key(new.submitter), plan.plan_id)
                    self.events.publish(new_event(plan.plan_id, 1, progress_pb2.PHASE_QUEUED,
                                                  message=f"queued on {new.queue}"), pipeline=pipe)
                    self.queues.enqueue(plan.plan_id, new.queue, new.timeout_s, pipeline=pipe)
                    pipe.execute()
                    return self.store.get(plan.plan_id), True
                except redis.WatchError:
                    continue  # created concurrently: answer with that job

    def waiting_of(self, submitter: str, cap: int) -> int:
        """How many of `submitter`'s jobs still wait (QUEUED), when that may reach `cap`; the set of its jobs
        forgets those that started or ended, so it stays about as large as the cap."""
        key = submitter_key(submitter)
        if self.redis.scard(key) < cap:
            return int(self.redis.scard(key))
        members = [m.decode() for m in self.redis.smembers(key)]
        waiting = set(self.store.queued(members))
        gone = [m for m in members if m not in waiting]
        if gone:
            self.redis.srem(key, *gone)
        return len(waiting)

    def cancel(self, job_id: str, reason: str) -> executor_pb2.Job:
        """A queued job leaves its queue as CANCELLED; a running one is asked to stop (its worker records the
        end); a finished one is left as it is. Returns the job; JobNotFoundError for an unknown id."""
        key = job_key(job_id)
        while True:
            with self.redis.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(key)
                    record = pipe.hgetall(key)
                    if not record:
                        self.store.raw(job_id)  # raises NOT_FOUND
                    phase = int(record[b"phase"])
                    if phase in TERMINAL_PHASES:
                        pipe.reset()
                        break
                    pipe.multi()
                    if phase == progress_pb2.PHASE_QUEUED:
                        self.queues.remove(job_id, record[b"queue"].decode(), pipeline=pipe)
                        self.events.publish(new_event(
                            job_id, int(record[b"last_sequence"]) + 1, progress_pb2.PHASE_CANCELLED,
                            message=f"cancelled before it started{': ' + reason if reason else ''}"), pipeline=pipe)
                    elif phase in RUNNING_PHASES:
                        pipe.hset(key, mapping={"cancel_requested": 1, "cancel_reason": reason})
                    pipe.execute()
                    break
                except redis.WatchError:
                    continue
        return self.store.get(job_id)

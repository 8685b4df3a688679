"""The client-side transitions of a job record, each one Redis transaction: Submit (record, index, first event
and rq enqueue together) and Cancel (a queued job leaves its queue and ends; a running one is asked to stop).
The holder-side transitions (claim, release, requeue) are in fleet.leases and fleet.recovery."""

from __future__ import annotations

from typing import Any

import redis
from tunefleet.v1 import executor_pb2, progress_pb2

from common.identity import Identity
from contract.errors import PlanError
from contract.progress import TERMINAL_PHASES, new_event
from fleet import budget as fleet_budget
from fleet import durability, queues, retention
from fleet.audit import AuditLog
from fleet.budget import BudgetRule
from fleet.errors import JobNotFoundError, QueueFullError, no_such_job
from fleet.events import EventLog
from fleet.jobs import RUNNING_PHASES, JobStore, NewJob, now_ms
from fleet.keys import JOBS_INDEX, job_key, submitter_key, team_jobs_key
from fleet.record import MOVED_FIELDS, JobRecord
from fleet.retention import Quotas


class Lifecycle:
    def __init__(self, connection: redis.Redis) -> None:
        self.redis: Any = connection  # redis-py's stubs type replies as unions of every RESP type
        self.store = JobStore(connection)
        self.events = EventLog(connection)
        self.queues = queues.JobQueues(connection)

    def submit(self, new: NewJob, max_queued: int = 0, max_queued_per_team: int = 0,
               audit: AuditLog | None = None, who: Identity | None = None,
               note: str = "", budget: BudgetRule | None = None,
               quotas: Quotas | None = None) -> tuple[executor_pb2.Job, bool]:
        """Create the job and queue it; (the job, True). The same plan again: (the existing job, False);
        PlanError when its id is taken by another plan; QueueFullError when its submitter already has
        `max_queued` jobs waiting, or its team `max_queued_per_team` (0: no cap). Concurrent Submits of one caller
        may pass a cap by as many calls as run at once (the count is read before the transaction). A created job
        is recorded in the audit log as `who`'s, in the same transaction. With a `budget`, the job's commitment is
        checked against its team's month in that transaction too (OverBudgetError): concurrent Submits cannot pass
        the budget together. With `quotas`, a new record must fit its team's stored records and bytes
        (fleet.retention), and is counted there."""
        plan, job_id = new.plan, new.job_id
        key = job_key(job_id)
        owners = (f"principal:{new.submitter}", f"team:{new.team}")
        stored_bytes = plan.ByteSize() + retention.RECORD_OVERHEAD_BYTES
        if not self.redis.exists(key):
            if quotas is not None:
                retention.check_stored(self.redis, quotas, new.team, stored_bytes)
            for owner, cap, what, flag in ((owners[0], max_queued, new.submitter or "this caller",
                                            "--max-queued-per-caller"),
                                           (owners[1], max_queued_per_team, f"team {new.team}",
                                            "--max-queued-per-team")):
                waiting = self.waiting_of(owner, cap) if cap else 0
                if cap and waiting >= cap:
                    raise QueueFullError(f"{what} already has {waiting:,} jobs waiting in the fleet, the most it may "
                                         f"queue ({flag} {cap:,}); wait for some to start, or cancel queued ones")
        if budget is not None:
            fleet_budget.prune_ended(self.redis, budget.team)
        while True:
            with self.redis.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(key)
                    if pipe.exists(key):
                        durability.found_on(self.redis, pipe)  # a retry: confirmed where the job was found
                        pipe.reset()
                        existing = self.store.get(job_id)
                        if existing.team != new.team:  # nothing of another team's job is told, not even its plan
                            raise PlanError("plan.plan_id", f"{plan.plan_id!r} is in use in the fleet; give this plan "
                                                            "a new plan_id")
                        if existing.plan.SerializeToString(deterministic=True) != plan.SerializeToString(
                                deterministic=True):
                            raise PlanError("plan.plan_id", f"job {plan.plan_id} already exists with a different "
                                                            "plan; give this plan a new plan_id")
                        return existing, False
                    if budget is not None:
                        fleet_budget.check_in(pipe, budget, new.cost_high_usd)
                    submitted = now_ms()
                    pipe.multi()
                    pipe.hset(key, mapping=new.fields(submitted))
                    pipe.zadd(JOBS_INDEX, {job_id: submitted})
                    for owner in owners:
                        pipe.sadd(submitter_key(owner), job_id)
                    pipe.sadd(team_jobs_key(new.team), job_id)
                    retention.record_stored(pipe, new.team, job_id, stored_bytes)
                    if audit is not None and who is not None:
                        audit.record(who, "submit", job_id, f"on {new.queue.name}{note}", pipeline=pipe)
                    self.events.publish(new_event(job_id, 1, progress_pb2.PHASE_QUEUED,
                                                  message=f"queued on {new.queue.name}"), pipeline=pipe)
                    self.queues.enqueue(job_id, new.queue.name, new.timeout_s, pipeline=pipe)
                    durability.execute_stamped(self.redis, pipe)
                    try:
                        return self.store.get(job_id), True
                    except JobNotFoundError as e:  # written on an old primary, read back from the new one
                        raise durability.NotReplicatedError(
                            f"the fleet's Redis failed over while job {job_id} was written; nothing was promised, "
                            "retry shortly (it is safe to retry)") from e
                except redis.WatchError:
                    continue  # created concurrently: answer with that job

    def move(self, job_id: str, moved: NewJob, message: str, audit: AuditLog, who: Identity,
             budget: BudgetRule | None = None) -> executor_pb2.Job:
        """One transaction: a queued job leaves its queue for `moved.queue` with `moved`'s plan, class, prediction
        and price, says so in an event and in the audit log. PlanError when it no longer waits in a queue;
        OverBudgetError when its new price, in place of its old, takes its team past `budget`."""
        key = job_key(job_id)
        while True:
            with self.redis.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(key)
                    record = self._watched(pipe, job_id)
                    if record.phase != progress_pb2.PHASE_QUEUED:
                        raise PlanError("job_id", "is no longer waiting (it started or ended); only a queued job moves")
                    if budget is not None:
                        fleet_budget.check_in(pipe, budget, moved.cost_high_usd, leave_out=job_id)
                    pipe.multi()
                    self.queues.remove(job_id, record.queue, pipeline=pipe)
                    fields = moved.fields(0)
                    pipe.hset(key, mapping={k: fields[k] for k in MOVED_FIELDS})
                    self.events.publish(new_event(job_id, record.last_sequence + 1, progress_pb2.PHASE_QUEUED,
                                                  message=message), pipeline=pipe)
                    self.queues.enqueue(job_id, moved.queue.name, moved.timeout_s, pipeline=pipe)
                    audit.record(who, "move", job_id, message, pipeline=pipe)
                    durability.execute_stamped(self.redis, pipe)
                    return self.store.get(job_id)
                except redis.WatchError:
                    continue

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

    def cancel(self, job_id: str, reason: str, audit: AuditLog | None = None,
               who: Identity | None = None) -> executor_pb2.Job:
        """A queued job leaves its queue as CANCELLED; a running one is asked to stop (its worker records the
        end); a finished one is left as it is. Returns the job; JobNotFoundError for an unknown id. The Cancel is
        recorded in the audit log as `who`'s, in the same transaction."""
        key = job_key(job_id)
        while True:
            with self.redis.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(key)
                    record = self._watched(pipe, job_id)
                    phase = record.phase
                    if phase in TERMINAL_PHASES:
                        pipe.reset()
                        break
                    pipe.multi()
                    if phase == progress_pb2.PHASE_QUEUED:
                        self.queues.remove(job_id, record.queue, pipeline=pipe)
                        self.events.publish(new_event(
                            job_id, record.last_sequence + 1, progress_pb2.PHASE_CANCELLED,
                            message=f"{_cancelled_waiting(record)}{': ' + reason if reason else ''}"), pipeline=pipe)
                    elif phase in RUNNING_PHASES:
                        pipe.hset(key, mapping={"cancel_requested": 1, "cancel_reason": reason})
                    if audit is not None and who is not None:
                        audit.record(who, "cancel", job_id, reason, pipeline=pipe)
                    durability.execute_stamped(self.redis, pipe)
                    break
                except redis.WatchError:
                    continue
        return self.store.get(job_id)

    @staticmethod
    def _watched(pipe: Any, job_id: str) -> JobRecord:
        """The record of a job under WATCH (read at once); JobNotFoundError when it has none."""
        raw = pipe.hgetall(job_key(job_id))
        if not raw:
            raise no_such_job(job_id)
        return JobRecord.parse(job_id, raw)


def _cancelled_waiting(record: JobRecord) -> str:
    """What a Cancel of a waiting job did, in words: a job that ran before (preempted, given back, its host lost) had
    started, and keeps its checkpoints."""
    ran_to, checkpoint = record.last.step, record.checkpoint_step
    if not ran_to and not record.gpu_seconds:
        return "cancelled before it started"
    kept = f"its checkpoint of step {checkpoint} is kept" if checkpoint else "it had written no checkpoint"
    return f"cancelled while waiting to resume (it had run to step {ran_to}; {kept})"

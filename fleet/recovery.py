"""The fleet's sweep: find jobs whose host was lost, put retries back in their queue when their backoff ends,
and preempt low-priority work for waiting high-priority jobs. Every worker sweeps with its heartbeat and the
executor service sweeps too; each step is one Redis transaction, so any number of sweepers agree.

Retries count infrastructure failures only (a host lost while running the job): a failed run, a refused
plan or a Cancel is never retried, and a drained or preempted job is requeued without counting a failure.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import redis
import structlog
from tunefleet.v1 import executor_pb2, progress_pb2

from contract.progress import TERMINAL_PHASES, new_event
from fleet import ledger, ordering, queues
from fleet.events import EventLog
from fleet.fairshare import FairShare
from fleet.gangs import queued_job_id
from fleet.hosts import HostRegistry
from fleet.jobs import RUNNING_PHASES, JobStore, now_ms, watched
from fleet.keys import POLICY, RETRYING, RUNNING_SET, job_key, lease_key
from fleet.ordering import PREEMPTION, RECLAIM, Running, Waiter
from fleet.record import JobRecord, field_names

log = structlog.get_logger("fleet.recovery")
SWEEP_INTERVAL_S = 5.0
DEFAULT_RETRY_LIMIT = 3
DEFAULT_RETRY_BACKOFF_S = 10.0
MAX_RETRY_BACKOFF_S = 600.0  # 10 s, 20 s, 40 s, ... never more than ten minutes
# How long a preemption victim has to finish its step, write its checkpoint and stop before it is interrupted (and
# keeps only its previous checkpoint): a sharded 70B checkpoint to network storage takes minutes.
DEFAULT_PREEMPT_CHECKPOINT_S = 300.0
GANG_WAIT = "gang"  # retry_kind of a job waiting to form its gang again (fleet.gangs), not a failure
GANG_JITTER = 0.5  # a gang's wait is its backoff × U(1, 1 + GANG_JITTER)
# What choosing a preemption victim reads of a running job: its priority and what a yield would lose (fleet.ledger).
_RUNNING_FIELDS = field_names("priority", "started_at_ms", "preempt_requested", "phase", "preempted_for", "gpus",
                              "nodes", "last_event", "hold_from_step", "checkpoint_step", "team",
                              "price_usd_per_gpu_hour")


@dataclass(frozen=True)
class FleetPolicy:
    """Per fleet (stored in Redis by `tunefleet serve executor`, read by every sweeper)."""

    preemption: bool = False  # off: strict queue order, a running job is never stopped for another
    retry_limit: int = DEFAULT_RETRY_LIMIT  # infrastructure failures a job survives; the next one fails it
    retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S  # wait before retry n: backoff × 2^(n-1)
    preempt_min_runtime_s: float = 0.0  # a job that has held its host for less is never preempted (0: any may be)
    preempt_checkpoint_s: float = DEFAULT_PREEMPT_CHECKPOINT_S  # a victim's deadline to checkpoint and stop

    def backoff_s(self, failures: int) -> float:
        return min(self.retry_backoff_s * 2 ** max(failures - 1, 0), MAX_RETRY_BACKOFF_S)

    def save(self, connection: Any) -> None:
        connection.hset(POLICY, mapping={"preemption": int(self.preemption), "retry_limit": self.retry_limit,
                                         "retry_backoff_s": self.retry_backoff_s,
                                         "preempt_min_runtime_s": self.preempt_min_runtime_s,
                                         "preempt_checkpoint_s": self.preempt_checkpoint_s})

    @classmethod
    def load(cls, connection: Any) -> FleetPolicy:
        stored = connection.hgetall(POLICY)
        if not stored:
            return cls()
        return cls(preemption=stored.get(b"preemption") == b"1",
                   retry_limit=int(stored.get(b"retry_limit", DEFAULT_RETRY_LIMIT)),
                   retry_backoff_s=float(stored.get(b"retry_backoff_s", DEFAULT_RETRY_BACKOFF_S)),
                   preempt_min_runtime_s=float(stored.get(b"preempt_min_runtime_s", 0.0)),
                   preempt_checkpoint_s=float(stored.get(b"preempt_checkpoint_s", DEFAULT_PREEMPT_CHECKPOINT_S)))


@dataclass
class SweepReport:
    recovered: list[str] = field(default_factory=list)  # lost jobs requeued (or failed past the retry limit)
    requeued: list[str] = field(default_factory=list)  # retries whose backoff ended
    preempted: list[str] = field(default_factory=list)  # running jobs asked to yield their host


class Sweeper:
    def __init__(self, connection: redis.Redis) -> None:
        self.redis: Any = connection  # redis-py's stubs type replies as unions of every RESP type
        self.events = EventLog(connection)
        self.queues = queues.JobQueues(connection)
        self.hosts = HostRegistry(connection)

    def retrying(self, limit: int) -> list[str]:
        """Job ids waiting out a retry backoff (in no queue yet), soonest first, at most `limit`."""
        return [m.decode() for m in self.redis.zrange(RETRYING, 0, limit - 1)]

    def sweep(self, now: int | None = None) -> SweepReport:
        now = now_ms() if now is None else now
        policy = FleetPolicy.load(self.redis)
        report = SweepReport()
        for job_id in sorted(m.decode() for m in self.redis.smembers(RUNNING_SET)):
            if not self.redis.exists(lease_key(job_id)) and self._recover(job_id, policy, now):
                report.recovered.append(job_id)
        for member in self.redis.zrangebyscore(RETRYING, "-inf", now):
            if self._requeue_due(member.decode()):
                report.requeued.append(member.decode())
        if policy.preemption:
            report.preempted = self._preempt(policy, now)
        report.preempted += self._reclaim(policy, now)
        return report

    def _recover(self, job_id: str, policy: FleetPolicy, now: int) -> bool:
        """A running job whose lease expired: requeue it after its backoff, or fail it past the retry limit."""
        key = job_key(job_id)
        with self.redis.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key, lease_key(job_id))
                raw = pipe.hgetall(key)
                if pipe.exists(lease_key(job_id)):
                    return False  # renewed (or claimed again) since the scan
                record = JobRecord.parse(job_id, raw)
                if not raw or record.phase in TERMINAL_PHASES or record.phase not in RUNNING_PHASES:
                    pipe.multi()
                    pipe.srem(RUNNING_SET, job_id)
                    if record.phase in ledger.OUTCOME_OF_PHASE:  # its holder's charge, if a failover lost it
                        ledger.charge(pipe, record, ledger.OUTCOME_OF_PHASE[record.phase],
                                      record.finished_at_ms or None)
                    pipe.execute()
                    return False
                host = record.host_id
                why = f"host {host} stopped renewing its lease (lost, or cut off from Redis)"
                pipe.multi()
                failures = _fail_over(pipe, self.events, record, policy, now, why)
                self.queues.forget_execution(job_id, record.queue, pipeline=pipe)
                pipe.execute()
                log.warning("job.host_lost", job_id=job_id, host_id=host, infra_failures=failures)
                return True
            except redis.WatchError:
                return False  # another sweeper or the holder got there first

    def _requeue_due(self, job_id: str) -> bool:
        key = job_key(job_id)
        with self.redis.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(RETRYING, key)
                if pipe.zscore(RETRYING, job_id) is None:
                    return False
                queue, timeout_s, phase = pipe.hmget(key, ["queue", "timeout_s", "phase"])
                pipe.multi()
                pipe.zrem(RETRYING, job_id)
                if phase is not None and int(phase) == progress_pb2.PHASE_QUEUED:  # not cancelled meanwhile
                    pipe.hset(key, "retry_at_ms", 0)
                    self.queues.enqueue(job_id, queue.decode(), int(timeout_s or 0), pipeline=pipe, at_front=True)
                pipe.execute()
                return True
            except redis.WatchError:
                return False

    def _preempt(self, policy: FleetPolicy, now: int) -> list[str]:
        """Per GPU class with no idle host: for each job waiting in a tier above some running job's, ask the victim
        fleet.ordering.victim names (PREEMPTION) to checkpoint and yield, one per waiter."""
        preempted = []
        fair = FairShare(self.redis, self.queues)
        snapshot = fair.snapshot(now / 1000)
        for gpu_class, hosts in self._hosts_by_class():
            if any(not h.running_job_id for h in hosts):
                continue  # a free host takes the waiting job; nothing to preempt
            running = self._running([h.running_job_id for h in hosts], now)
            quotas = snapshot.quotas(gpu_class)
            held = dict(quotas.held_gpus) if quotas else {}
            for priority in (executor_pb2.PRIORITY_HIGH, executor_pb2.PRIORITY_NORMAL):
                tier = queues.tier_of(priority)
                ids, _, waiters = fair.waiters(queues.QueueRef(gpu_class, priority).name, tier)
                teams = {w.job_id: w.team for w in waiters}
                yielding = [r for r in running if r.yields_to_tier is not None and r.yields_to_tier <= tier]
                for waiter in [queued_job_id(w) for w in ids][len(yielding):]:
                    team = teams.get(waiter) or (self.redis.hget(job_key(waiter), "team") or b"").decode()
                    chosen = ordering.victim(PREEMPTION, Waiter(waiter, team, 0.0, tier=tier), running, held, quotas,
                                             self._min_start_s(policy, now))
                    if chosen is None:
                        break
                    if self._ask_to_yield(chosen.job_id, waiter, team,
                                          now + int(policy.preempt_checkpoint_s * 1000), PREEMPTION):
                        running[running.index(chosen)] = replace(chosen, yields_to_tier=tier)
                        held[chosen.team] = held.get(chosen.team, 0) - chosen.gpus
                        preempted.append(chosen.job_id)
        return preempted

    def _reclaim(self, policy: FleetPolicy, now: int) -> list[str]:
        """Per GPU class with quotas and no idle host: for each job waiting whose team would still be within its
        quota, ask the victim fleet.ordering.victim names (RECLAIM: a job of a team holding more than its quota) to
        checkpoint and yield, one per waiter; a job already yielding makes room for one waiter."""
        fair = FairShare(self.redis, self.queues)
        snapshot = fair.snapshot(now / 1000)
        reclaimed = []
        for gpu_class, hosts in self._hosts_by_class():
            quotas = snapshot.quotas(gpu_class)
            if quotas is None or any(not h.running_job_id for h in hosts):
                continue
            running = self._running([h.running_job_id for h in hosts], now)
            held = dict(quotas.held_gpus)
            freeing = [r for r in running if r.yielding]
            for priority in queues.TIERS:
                for waiter in fair.waiters(queues.QueueRef(gpu_class, priority).name)[2]:
                    if held.get(waiter.team, 0) + waiter.gpus > quotas.quota(waiter.team):
                        continue  # it would borrow: no reclaim for it
                    if freeing:  # a job already yielding makes room for it
                        freeing.pop()
                        held[waiter.team] = held.get(waiter.team, 0) + waiter.gpus
                        continue
                    chosen = ordering.victim(RECLAIM, waiter, running, held, quotas, self._min_start_s(policy, now))
                    if chosen is None:
                        continue
                    if self._ask_to_yield(chosen.job_id, waiter.job_id, waiter.team,
                                          now + int(policy.preempt_checkpoint_s * 1000), RECLAIM):
                        running[running.index(chosen)] = replace(chosen, yields_to_tier=waiter.tier)
                        held[chosen.team] -= chosen.gpus
                        held[waiter.team] = held.get(waiter.team, 0) + waiter.gpus
                        reclaimed.append(chosen.job_id)
        return reclaimed

    @staticmethod
    def _min_start_s(policy: FleetPolicy, now: int) -> float:
        """A job started after this (s) has run less than the policy's minimum runtime: it is never a victim."""
        return now / 1000 - policy.preempt_min_runtime_s

    def _hosts_by_class(self) -> list[tuple[str, list[executor_pb2.Host]]]:
        by_class: dict[str, list[executor_pb2.Host]] = defaultdict(list)
        for host in self.hosts.hosts():
            by_class[host.gpu_class].append(host)
        return sorted(by_class.items())

    def _running(self, job_ids: list[str], now: int) -> list[Running]:
        """The running jobs among `job_ids`, as the victim order sees them."""
        rows = []
        for record in JobStore(self.redis).read(job_ids, _RUNNING_FIELDS):
            if record is None or record.phase not in RUNNING_PHASES:
                continue
            lost = ledger.charge_of(record, now, ledger.GIVEN_BACK)  # what a yield now would run again
            # the tier of the waiter it yields to (a waiter gone since: any tier's)
            yields_to = self._priority_of(record.preempted_for)
            rows.append(Running(record.job_id, record.team, queues.tier_of(record.priority),
                                record.started_at_ms / 1000, record.total_gpus,
                                lost.lost_gpu_seconds if lost else 0.0,
                                (queues.tier_of(yields_to) if yields_to else 0) if record.preempt_requested else None))
        return rows

    def _priority_of(self, job_id: str) -> int:
        return int(self.redis.hget(job_key(job_id), "priority") or 0) if job_id else 0

    def _ask_to_yield(self, job_id: str, waiter: str, waiter_team: str, deadline_ms: int, why: str) -> bool:
        """Ask a running job to checkpoint now and give its host to `waiter` (of `waiter_team`), by `deadline_ms`
        (its worker then interrupts it: it keeps its previous checkpoint)."""
        key = job_key(job_id)
        with self.redis.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key)
                phase, requested = pipe.hmget(key, ["phase", "preempt_requested"])
                if phase is None or int(phase) not in RUNNING_PHASES or requested == b"1":
                    return False
                pipe.multi()
                pipe.hset(key, mapping={"preempt_requested": 1, "preempted_for": waiter,
                                        "preempted_for_team": waiter_team, "preempt_deadline_ms": deadline_ms,
                                        "preempt_kind": why})
                pipe.execute()
            except redis.WatchError:
                return False
        log.info("job.preempting", job_id=job_id, preempted_for=waiter, deadline_ms=deadline_ms)
        return True


def _end_hold(pipe: Any, events: EventLog, record: JobRecord, phase: int, message: str, outcome: str) -> None:
    """Inside a transaction on a running job's record: take the job from its holder (the fence moves on, so
    whatever the old holder still writes is refused; it leaves the running set), charge the hold (fleet.ledger)
    and publish the job's next event, at the step it had reached."""
    ledger.charge(pipe, record, outcome)
    last, job_id = record.last, record.job_id
    pipe.hincrby(job_key(job_id), "fence", 1)
    pipe.srem(RUNNING_SET, job_id)
    events.publish(new_event(job_id, record.last_sequence + 1, phase, step=last.step,
                             total_steps=last.total_steps, message=message), pipeline=pipe)


def _fail_over(pipe: Any, events: EventLog, record: JobRecord, policy: FleetPolicy, now: int, why: str) -> int:
    """Inside a transaction: one more infrastructure failure of a running job; it waits out its backoff and is
    queued again (to resume from its last complete checkpoint), or fails past the retry limit. Returns the count."""
    job_id = record.job_id
    key = job_key(job_id)
    failures = record.infra_failures + 1
    if failures > policy.retry_limit:
        message = (f"{why}; that is {failures} infrastructure failures, past the fleet's retry limit of "
                   f"{policy.retry_limit}; checkpoints kept — Submit the plan under a new id, or raise --retry-limit")
        pipe.hset(key, mapping={"infra_failures": failures, "error": message})
        _end_hold(pipe, events, record, progress_pb2.PHASE_FAILED, message, ledger.FAILED)
        return failures
    delay_s = policy.backoff_s(failures)
    _wait_in_retrying(pipe, job_id, now, delay_s, why, "")
    pipe.hset(key, "infra_failures", failures)
    _end_hold(pipe, events, record, progress_pb2.PHASE_QUEUED,
              f"{why}; retry {failures} of {policy.retry_limit} in {delay_s:g} s, resuming from its last complete "
              "checkpoint", ledger.HOST_LOST)
    return failures


def _wait_in_retrying(pipe: Any, job_id: str, now: int, delay_s: float, reason: str, kind: str) -> None:
    """Inside a transaction: the job leaves its host and waits `delay_s` before its queue takes it back (front)."""
    at_ms = now + int(delay_s * 1000)
    pipe.hset(job_key(job_id), mapping={"retry_at_ms": at_ms, "retry_reason": reason, "retry_kind": kind,
                                        "host_id": "", "started_at_ms": 0})
    pipe.zadd(RETRYING, {job_id: at_ms})


def _as_holder(connection: Any, job_id: str, fence: int, write: Callable[[Any, JobRecord], None]) -> bool:
    """Inside one transaction on the job's record, if `fence` still holds it: release its lease and `write` the
    rest (the pipeline is in MULTI). False when the job had already moved on (stale fence)."""
    def step(pipe: Any, record: JobRecord) -> bool:
        if record.fence != fence:
            return False
        pipe.multi()
        pipe.delete(lease_key(job_id))
        write(pipe, record)
        pipe.execute()
        return True
    return watched(connection, job_id, step)  # again when the record changed (a Cancel, a preemption request)


def release_held(connection: Any, job_id: str, fence: int, why: str, *, infra_failure: bool) -> bool:
    """A holder ends its attempt without a run to show for it, to be tried again later: after a lost gang member
    (infra_failure: counted against the retry limit, backoff by failures), or a gang that did not form (nothing
    counted but the attempt: backoff by gang attempts). False when the job had already moved on (stale fence)."""
    events = EventLog(connection)

    def write(pipe: Any, record: JobRecord) -> None:
        policy, now = FleetPolicy.load(connection), now_ms()
        if infra_failure:
            _fail_over(pipe, events, record, policy, now, why)
            return
        attempts = record.gang_attempts + 1
        # jittered: two gangs that each hold part of the hosts the other needs both time out, and must not retry
        # in lockstep forever
        delay_s = round(policy.backoff_s(attempts) * random.uniform(1.0, 1.0 + GANG_JITTER), 1)
        pipe.hset(job_key(job_id), "gang_attempts", attempts)
        _wait_in_retrying(pipe, job_id, now, delay_s, why, GANG_WAIT)
        _end_hold(pipe, events, record, progress_pb2.PHASE_QUEUED,
                  f"{why}; the gang tries again in {delay_s:g} s, first in its queue", ledger.GIVEN_BACK)
    return _as_holder(connection, job_id, fence, write)


def requeue_held(connection: Any, job_id: str, fence: int, message: str) -> bool:
    """A holder gives its job back (drained or preempted, checkpoint written): QUEUED again at the front of its
    queue, lease released, no failure counted. False when the job had already moved on (stale fence)."""
    events, job_queues = EventLog(connection), queues.JobQueues(connection)

    def write(pipe: Any, record: JobRecord) -> None:
        pipe.hset(job_key(job_id), mapping={"host_id": "", "started_at_ms": 0, "preempt_requested": 0})
        _end_hold(pipe, events, record, progress_pb2.PHASE_QUEUED, message, ledger.GIVEN_BACK)
        job_queues.enqueue(job_id, record.queue, record.timeout_s, pipeline=pipe, at_front=True)
    return _as_holder(connection, job_id, fence, write)


def give_back_unconfirmed(connection: Any, job_id: str, claimed: int | str | None, host_id: str) -> bool:
    """After a claim a replica did not confirm (fleet.durability): the run must not start. Give the job back to the
    front of its queue if the claim stands on the primary reached now; if it does not (a failover lost it) and the
    job waits without a place in its queue (its dequeue was replicated, its claim was not), put it back there: a
    second entry is harmless, a claim takes a job once. Whether it waits in its queue now."""
    if isinstance(claimed, int) and requeue_held(connection, job_id, claimed, f"host {host_id} took the job but "
                                                 "no replica confirmed it in time; back to the front of its queue"):
        return True
    record = JobRecord.parse(job_id, connection.hgetall(job_key(job_id)))
    job_queues = queues.JobQueues(connection)
    if record.phase != progress_pb2.PHASE_QUEUED or record.retry_at_ms or not record.queue:
        return False
    if job_queues.position(job_id, record.queue) is None:
        job_queues.enqueue(job_id, record.queue, record.timeout_s, at_front=True)
    return True

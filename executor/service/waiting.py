"""Why a queued job waits, where it stands, and when it is expected to start — from one reading of the fleet.

The place and reason come from the queues, the class's start order (fleet.fairshare) and the hosts; the expected
start replays the scheduling rules over the class's hosts (fleet.eta), with each job's predicted duration as Submit
stored it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from google.protobuf import timestamp_pb2
from tunefleet.v1 import executor_pb2

from fleet import queues
from fleet.eta import NEVER, NOW, Holder, Span, Start, Yielding, remaining, replay
from fleet.fairshare import ClassLine, FairShare, queue_class
from fleet.jobs import now_ms
from fleet.ledger import AS_PREDICTED, HoldModel, hold_models
from fleet.ordering import RECLAIM, Line, Snapshot, TeamShare
from fleet.record import JobRecord, field_names
from fleet.recovery import GANG_WAIT, SWEEP_INTERVAL_S, FleetPolicy

# What a queued job's place and expected start read of its record (the queue first: every record has it).
PLACE_FIELDS = field_names("queue", "gpu_class", "retry_at_ms", "retry_kind", "retry_reason", "infra_failures", "team")
# What a running job's remaining time reads of its record.
RUNNING_FIELDS = field_names("started_at_ms", "last_event", "predicted_s", "predicted_low_s", "predicted_high_s",
                             "team", "gpus", "priority", "nodes", "preempt_requested")


def predicted(record: JobRecord) -> Span | None:
    """The job's predicted duration as Submit stored it; None for a plan without a prediction."""
    mid, low, high = record.predicted
    return Span(mid, low, high) if mid > 0 else None


def free_in(host: executor_pb2.Host, running: Mapping[str, JobRecord | None], at_ms: int,
            hold: HoldModel = AS_PREDICTED) -> Span:
    """How long until the host is free: now when idle, else its running job's remaining time (its predicted
    duration as the class's hold model makes it, when its run reports no ETA)."""
    record = running.get(host.running_job_id) if host.running_job_id else None
    if not record:
        return NOW
    started_ms = record.started_at_ms or at_ms
    duration = predicted(record)
    return remaining(duration.held(hold) if duration else None, max(0, at_ms - started_ms) / 1000,
                     record.last.eta_s)


def holders(hosts: list[executor_pb2.Host], gpu_class: str, running: Mapping[str, JobRecord | None],
            at_ms: int, hold: HoldModel = AS_PREDICTED) -> list[Holder]:
    """The class's healthy hosts for a replay: when each is free, whose GPUs its running job holds, and — a job on one
    host — what the sweep reads to ask it to yield (its tier, how long it has run, whether it was asked already)."""
    out = []
    for h in hosts:
        if h.gpu_class != gpu_class or h.quarantine_reason:
            continue
        record = running.get(h.running_job_id) if h.running_job_id else None
        if not record:
            out.append(Holder(free_in(h, running, at_ms, hold)))
            continue
        one_host = record.nodes <= 1 and record.priority in queues.TIERS
        out.append(Holder(free_in(h, running, at_ms, hold), record.team, max(1, record.gpus),
                          job_id=h.running_job_id if one_host else "",
                          tier=queues.tier_of(record.priority) if one_host else 0,
                          ran_s=max(0, at_ms - (record.started_at_ms or at_ms)) / 1000,
                          yielding=record.preempt_requested))
    return out


def yield_rules(policy: FleetPolicy) -> Yielding:
    """How running jobs give way under the fleet's policy, for the replay: the sweep asks within its interval, and the
    victim has the policy's deadline to checkpoint and stop."""
    return Yielding(policy.preemption, reclaim=True, min_runtime_s=policy.preempt_min_runtime_s,
                    takes=Span(SWEEP_INTERVAL_S, 0.0, max(SWEEP_INTERVAL_S, policy.preempt_checkpoint_s)))


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
    yielding: dict[str, tuple[str, str]]  # waiting job id -> (the running job asked to yield to it, why)
    # (queue, job id) -> its place in its class's start order (0: next), when the caller does not know it
    index_of: Callable[[str, str], int | None]
    # why a job waits for its team's limit on GPUs (queue, job id, team), or "" when it does not
    limit_reason: Callable[[str, str, str], str] = lambda queue, job_id, team: ""
    at_ms: int = field(default_factory=now_ms)
    # a running job as the caller may read of it (fleet.jobs.job_label: another team's by its team only)
    name_of: Callable[[str], str] = lambda job_id: f"job {job_id}"
    # the hosts' running jobs' records (RUNNING_FIELDS), read once for everything the call answers
    running: Mapping[str, JobRecord | None] = field(default_factory=dict)

    def place(self, record: JobRecord, index: int | None = None) -> Waiting:
        wait_s = max(record.retry_at_ms - now_ms(), 0) / 1000
        if record.retry_at_ms and record.retry_kind == GANG_WAIT:
            return Waiting(f"{record.retry_reason}; its gang tries to form again in {wait_s:.0f} s", 0)
        if record.retry_at_ms:
            return Waiting(f"retry {record.infra_failures} of {self.policy.retry_limit} after {record.retry_reason}; "
                           f"back in its queue in {wait_s:.0f} s", 0)
        ref = record.queue_ref
        if index is None:
            index = self.index_of(record.queue, record.job_id)
        if ref is None or index is None:
            return Waiting("being handed to a worker", 0)
        limited = self.limit_reason(record.queue, record.job_id, record.team)
        return Waiting(limited or self._reason(record.job_id, ref.gpu_class, index), index + 1)

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
        busy = [self.name_of(h.running_job_id) for h in of_class if h.running_job_id]
        if len(busy) == len(of_class):
            if job_id in self.yielding:
                victim, why = self.yielding[job_id]
                what = "a reclaim: its team borrows beyond its quota" if why == RECLAIM else "preemption"
                return f"waiting for {self.name_of(victim)} to checkpoint and yield its host ({what})"
            return f"all {len(of_class)} {gpu_class} host(s) are busy ({', '.join(busy)}); {ahead} job(s) ahead of it"
        if ahead:
            return f"{ahead} job(s) of {gpu_class} ahead of it (the start order: jobs within their team's quota, " \
                   "then by tier, then by fair share)"
        return "next in its queue; a free host picks it up within seconds"


class OrderCache:
    """Start orders of classes, each read once per request (a Fleet or Get reads several jobs' places)."""

    def __init__(self, fair: FairShare) -> None:
        self._fair = fair
        self._classes: dict[str, ClassLine] = {}
        self._lines: dict[str, Line] = {}
        self._starts: dict[str, dict[str, Start]] = {}
        self._index: dict[str, dict[str, int]] = {}
        self._holds: dict[str, HoldModel] | None = None
        self._snapshot: Snapshot | None = None
        self._fleet: tuple[list[executor_pb2.Host], Mapping[str, JobRecord | None]] | None = None
        self._yielding = NEVER
        self.at_ms = now_ms()

    def use_fleet(self, hosts: list[executor_pb2.Host], running: Mapping[str, JobRecord | None],
                  policy: FleetPolicy) -> None:
        """The fleet's hosts, running jobs and policy now: places then follow the replay's start order (class_order),
        and the replay plays the policy's preemption and the quotas' reclaim."""
        self._fleet = (hosts, running)
        self._yielding = yield_rules(policy)

    def snapshot(self) -> Snapshot:
        if self._snapshot is None:
            self._snapshot = self._fair.snapshot(self.at_ms / 1000)
        return self._snapshot

    def class_line(self, gpu_class: str) -> ClassLine:
        if gpu_class not in self._classes:
            self._classes[gpu_class] = self._fair.class_line(gpu_class, self.snapshot())
        return self._classes[gpu_class]

    def starts(self, gpu_class: str, hosts: list[executor_pb2.Host],
               running: Mapping[str, JobRecord | None]) -> dict[str, Start]:
        """When each job of the class's window is expected to start (fleet.eta.replay over the class's hosts), from
        the cache's time; every predicted duration as the class's hold model makes it (fleet.ledger: the start-up and
        ratio this fleet's complete runs of the class showed; the prediction itself before the first)."""
        if gpu_class not in self._starts:
            if self._holds is None:
                self._holds = hold_models(self._fair.redis)
            hold = self._holds.get(gpu_class, AS_PREDICTED)
            snapshot = self.snapshot()
            self._starts[gpu_class] = replay(
                self.class_line(gpu_class).waiters, holders(hosts, gpu_class, running, self.at_ms, hold),
                snapshot.usage_s, snapshot.weights(), snapshot.quotas(gpu_class), hold, self._yielding)
        return self._starts[gpu_class]

    def class_order(self, gpu_class: str) -> list[str]:
        """The class's queued ids (each tier's window) in the order they are expected to start: the order in which the
        replay over the fleet's hosts starts them (fleet.eta: quotas free as jobs end, so a job held back by its
        team's limit starts as its team's jobs end, ahead of borrowers), then those it cannot start, in the line's
        order; without the fleet's hosts (use_fleet), the line's order (fleet.fairshare), held-back jobs last."""
        line = self.class_line(gpu_class)
        static = line.order + line.held_back
        if self._fleet is None:
            return static
        started = [job_id for job_id in self.starts(gpu_class, *self._fleet) if job_id in line.queue_of]
        placed = set(started)
        return started + [job_id for job_id in static if job_id not in placed]

    def line(self, queue: str) -> Line:
        if queue not in self._lines:
            self._lines[queue] = self.class_line(queue_class(queue)).of(queue)
        return self._lines[queue]

    def index(self, queue: str, job_id: str) -> int | None:
        """The job's place in its class's start order (0: next); past its queue's window, behind every job of the
        window in its tier and the tiers above, in FIFO order; None when it is in no queue."""
        gpu_class = queue_class(queue)
        line = self.class_line(gpu_class)
        if gpu_class not in self._index:
            self._index[gpu_class] = {job_id: i for i, job_id in enumerate(self.class_order(gpu_class))}
        if job_id in self._index[gpu_class]:
            return self._index[gpu_class][job_id]
        position = self._fair.queues.position(job_id, queue)
        if position is None:
            return None
        tiers = [q.name for q in queues.QueueRef.of_class(gpu_class)]
        above = sum(tiers.index(line.queue_of[j]) <= tiers.index(queue) for j in self._index[gpu_class])
        own = self.line(queue)
        return above + position - len(own.order) - len(own.held_back)

    def limit_reason(self, queue: str, job_id: str, team: str) -> str:
        """Why the job waits for its team's limit on its class, or "" when it does not: what the team holds now and
        what its jobs ahead of this one in the line will take, against its quota and borrowing (fleet.fairshare holds
        it back on the two together)."""
        if job_id not in self.line(queue).held_back or self._snapshot is None:
            return ""
        gpu_class = queue_class(queue)
        line = self.class_line(gpu_class)
        share = self._snapshot.shares.get(team, TeamShare())
        held = self._snapshot.held_gpus.get(gpu_class, {}).get(team, 0)
        quota, limit = share.quota_gpus.get(gpu_class, 0), share.limit_gpus(gpu_class)
        placed = set(line.order)
        ahead = [w for w in line.waiters if w.team == team and w.job_id in placed]
        taken = f" and its {len(ahead)} job(s) ahead of it will take {sum(w.gpus for w in ahead)} more" \
            if ahead else ""
        return (f"waits for its team's limit: team {team} holds {held} {gpu_class} GPU(s){taken}, against its quota "
                f"of {quota} plus {limit - quota:g} it may borrow; it starts as the team's jobs end")

"""Job records in Redis: the documented key layout, atomic state transitions and Job protos.

Keys: fleet.keys (the table of every key).

Job hash fields: typed in fleet.record.JobRecord, through which every reader outside fleet/ reads them; created by
fleet.lifecycle's Submit (NewJob.fields), then each written only by the modules fleet.record.WRITERS names for it,
inside their own atomic steps: fleet.lifecycle (Move, Cancel), fleet.leases (a claim: phase LOADING, host, fence, and
it clears the last attempt's requests), fleet.events (every event: phase, last event, checkpoint step), fleet.recovery
(the sweep and a holder's hand-back: fence, retries, preemption requests, an error past the retry limit),
fleet.ledger (a hold's charge), fleet.budget (budget_stop) and the holder, only through JobStore's fenced writes
(record_output, record_error, record_replan).

The phase field is the job's lock: a worker claims a job only from QUEUED, Cancel of a queued job moves it
from QUEUED to CANCELLED, both atomically, so a job is never both cancelled and started. The fence field
says which claim owns a running job; every write of a holder is checked against it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
from google.protobuf import timestamp_pb2
from tunefleet.v1 import executor_pb2, plan_pb2, progress_pb2

from common.bounds import parse_count
from common.identity import UNAUTHENTICATED_ADMIN
from contract.errors import LeaseLostError, PlanError
from fleet.errors import JobNotFoundError, no_such_job
from fleet.keys import JOBS_INDEX, job_key
from fleet.ordering import PREEMPTION
from fleet.queues import QueueRef
from fleet.record import JobRecord, field_names, parse_rows

T = TypeVar("T")

JOB_SCHEMA_VERSION = "1"
# Events kept per job stream (oldest trimmed first; the job record keeps the last event whatever is trimmed).
# At the default of one training event per 10 s that is over a day of events.
DEFAULT_EVENTS_MAX_LEN = 10_000
# How long a finished job's event stream is kept; the job record (with its last event) stays.
EVENTS_RETENTION_S = 7 * 24 * 3600
RUNNING_PHASES = frozenset({progress_pb2.PHASE_LOADING, progress_pb2.PHASE_PREFLIGHT, progress_pb2.PHASE_TRAINING,
                            progress_pb2.PHASE_CHECKPOINTING})


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _timestamp(ms: int) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    if ms:
        ts.FromMilliseconds(ms)
    return ts


@dataclass(frozen=True)
class NewJob:
    """What Submit stores for a validated plan."""

    plan: plan_pb2.Plan
    queue: QueueRef  # its GPU class and tier
    gpus: int
    timeout_s: int
    events_max_len: int = DEFAULT_EVENTS_MAX_LEN
    submitter: str = ""  # the principal who submitted it (fleet.lifecycle caps what one caller may keep queued)
    team: str = ""  # the team it belongs to: who may see and cancel it, and the per-team cap
    predicted_s: tuple[float, float, float] = (0.0, 0.0, 0.0)  # the plan's duration: most likely, low, high
    nodes: int = 1
    price_usd_per_gpu_hour: float = 0.0  # what its holds are charged (fleet.ledger)
    cost_high_usd: float = 0.0  # the upper end of its predicted cost: what it commits against its team's budget
    scoped_id: str = ""  # its id in the fleet where its team's ids are scoped (executor.service.scoping); else plan_id

    @property
    def job_id(self) -> str:
        return self.scoped_id or self.plan.plan_id

    def fields(self, submitted_ms: int) -> dict[str, bytes | str | int]:
        """The new record; its first event (QUEUED) is published after it, which sets phase and last event."""
        return {"schema": JOB_SCHEMA_VERSION, "plan": self.plan.SerializeToString(), "priority": self.queue.priority,
                "queue": self.queue.name, "gpu_class": self.queue.gpu_class, "gpus": self.gpus,
                "phase": progress_pb2.PHASE_QUEUED, "submitted_at_ms": submitted_ms, "started_at_ms": 0,
                "finished_at_ms": 0, "host_id": "", "error": "", "log_path": "", "output_dir": "",
                "last_event": b"", "last_sequence": 0, "cancel_requested": 0, "fence": 0,
                "infra_failures": 0, "retry_at_ms": 0, "preempt_requested": 0, "preempted_for": "",
                "events_max_len": self.events_max_len, "timeout_s": self.timeout_s, "submitter": self.submitter,
                "team": self.team, "predicted_s": self.predicted_s[0], "predicted_low_s": self.predicted_s[1],
                "predicted_high_s": self.predicted_s[2], "nodes": self.nodes,
                "price_usd_per_gpu_hour": self.price_usd_per_gpu_hour, "cost_high_usd": self.cost_high_usd}


# The team of a fleet without identities (common.identity's UNAUTHENTICATED_ADMIN and TOKEN_FILE_ADMIN): its job ids
# carry no team mark.
UNSCOPED_TEAM = UNAUTHENTICATED_ADMIN.team
TEAM_MARK_HEX = 6


def team_mark(team: str) -> str:
    """What a team's job ids carry in the fleet (executor.service.scoping): '-t' and 6 hex of the team name's
    SHA-256, letters rq admits in a job id; '' for the unscoped team."""
    if not team or team == UNSCOPED_TEAM:
        return ""
    return "-t" + hashlib.sha256(team.encode()).hexdigest()[:TEAM_MARK_HEX]


def within_team(job_id: str, team: str) -> str:
    """A fleet id as `team` names it: its own job by its plan id (the id without the team's mark), any other as it
    is."""
    mark = team_mark(team)
    return job_id[:-len(mark)] if mark and job_id.endswith(mark) else job_id


def job_label(job_id: str, team: str, viewer_team: str | None) -> str:
    """A job as someone of `viewer_team` may read of it: by its id within their own team (its plan id), by its fleet
    id for an admin (None), else only as a job of its team (another team's job ids are never shown)."""
    if viewer_team is None:
        return f"job {job_id}"
    if team != viewer_team:
        return f"a job of team {team}"
    return f"job {within_team(job_id, team)}"


# A holder's write to its job's record: HSET only while the record's fence is the holder's (ARGV[1]); 1 when written.
_HOLDER_WRITE = """
if redis.call('HGET', KEYS[1], 'fence') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
return 1
"""


@dataclass(frozen=True)
class StopRequests:
    cancel_reason: str | None  # None: no Cancel; '' Cancel without a reason
    preempted_for: str | None  # None: not preempted; else the job it yields its host to, as its team may read it
    preempt_deadline_ms: int = 0  # when preempted: the time by which it must have checkpointed and stopped
    budget_stop: str = ""  # why the fleet stops it for its team's budget (fleet.budget); '' while it may run
    yield_kind: str = PREEMPTION  # when preempted: PREEMPTION (a higher tier) or RECLAIM (its team borrows)


# What a Job without its plan shows (List), first the field that says whether the record exists at all.
SUMMARY_FIELDS = field_names("schema", "phase", "priority", "queue", "gpu_class", "host_id", "submitted_at_ms",
                             "started_at_ms", "finished_at_ms", "error", "log_path", "output_dir", "infra_failures",
                             "last_event", "feedback", "team", "submitter", "price_usd_per_gpu_hour", "cost_high_usd",
                             "spent_usd", "gpu_seconds", "lost_gpu_seconds", "gpus", "nodes")


def job_from_record(record: JobRecord, with_plan: bool = True) -> executor_pb2.Job:
    if record.schema != JOB_SCHEMA_VERSION:
        raise JobNotFoundError("job_id", f"job {record.job_id} has record schema {record.schema!r}; this executor "
                                         f"reads schema {JOB_SCHEMA_VERSION}")
    job = executor_pb2.Job(
        job_id=record.job_id, phase=record.phase, priority=record.priority,  # type: ignore[arg-type]
        queue=record.queue, gpu_class=record.gpu_class, host_id=record.host_id,
        submitted_at=_timestamp(record.submitted_at_ms), error=record.error, log_path=record.log_path,
        output_uri=record.output_dir, infra_failures=record.infra_failures, team=record.team,
        submitter=record.submitter, price_usd_per_gpu_hour=record.price_usd_per_gpu_hour,
        cost_high_usd=record.cost_high_usd, spent_usd=record.spent_usd, gpu_seconds=record.gpu_seconds,
        lost_gpu_seconds=record.lost_gpu_seconds)
    if record.started_at_ms:
        job.started_at.CopyFrom(_timestamp(record.started_at_ms))
    if record.finished_at_ms:
        job.finished_at.CopyFrom(_timestamp(record.finished_at_ms))
    if with_plan:
        job.plan.ParseFromString(record.plan)
    job.last_event.ParseFromString(record.last_event)
    if record.feedback:
        job.feedback.ParseFromString(record.feedback)
    return job


class JobStore:
    """The job records of one fleet."""

    def __init__(self, connection: redis.Redis) -> None:
        self.redis: Any = connection  # redis-py's stubs type replies as unions of every RESP type
        self._holder_write = connection.register_script(_HOLDER_WRITE)

    def record(self, job_id: str, fields: tuple[str, ...] = ()) -> JobRecord:
        """The job's record (every field, or only `fields`); JobNotFoundError when it has none."""
        (found,) = self.read([job_id], fields)
        if found is None:
            raise no_such_job(job_id)
        return found

    def read(self, job_ids: list[str], fields: tuple[str, ...] = ()) -> list[JobRecord | None]:
        """The records of `job_ids` (None for a job without one): every field, or only `fields`."""
        return parse_rows(job_ids, self._rows(job_ids, fields))

    def get(self, job_id: str, with_plan: bool = True) -> executor_pb2.Job:
        return job_from_record(self.record(job_id), with_plan)

    def stop_requests(self, job_id: str) -> StopRequests:
        """What has been asked of a running job: Cancel (with its reason) and preemption (for which job, and by
        when it must have checkpointed)."""
        cancel, reason, preempt, preempted_for, deadline_ms, budget_stop, team, waiter_team, kind = self.redis.hmget(
            job_key(job_id), ["cancel_requested", "cancel_reason", "preempt_requested", "preempted_for",
                              "preempt_deadline_ms", "budget_stop", "team", "preempted_for_team", "preempt_kind"])
        yields_to = None
        if preempt == b"1":
            yields_to = job_label((preempted_for or b"").decode(), (waiter_team or team or b"").decode(),
                                  (team or b"").decode())
        return StopRequests((reason or b"").decode() if cancel == b"1" else None, yields_to, int(deadline_ms or 0),
                            (budget_stop or b"").decode(), (kind or PREEMPTION.encode()).decode())

    # What a holder writes of its job's record: each in one step with the fence check (fleet.leases' promise),
    # LeaseLostError, writing nothing, when another host holds the job now.

    def record_output(self, job_id: str, fence: int, output_dir: str, log_path: str) -> None:
        """Where the holder's run writes (its output directory and its log)."""
        self._as_holder(job_id, fence, {"output_dir": output_dir, "log_path": log_path})

    def record_error(self, job_id: str, fence: int, error: str) -> None:
        """Why the holder's run failed."""
        self._as_holder(job_id, fence, {"error": error})

    def record_replan(self, job_id: str, fence: int, plan: plan_pb2.Plan, replans: int) -> None:
        """The plan an out-of-memory re-plan chose, and how many re-plans the job has had with it."""
        self._as_holder(job_id, fence, {"plan": plan.SerializeToString(), "oom_replans": replans})

    def _as_holder(self, job_id: str, fence: int, fields: Mapping[str, str | int | bytes]) -> None:
        flat = [x for pair in fields.items() for x in pair]
        if not self._holder_write(keys=[job_key(job_id)], args=[fence, *flat]):
            raise LeaseLostError(f"job {job_id} moved on from fence {fence}: this host's write was refused")

    def page(self, after: PageCursor | None, batch: int) -> list[tuple[str, int]]:
        """Up to `batch` (job id, submit ms) pairs, newest first, past the cursor: the index read from the cursor's
        millisecond on, skipping the entries of that millisecond already passed."""
        high = "+inf" if after is None else after.ms
        rows = self.redis.zrevrangebyscore(JOBS_INDEX, high, "-inf", start=after.skip if after else 0, num=batch,
                                           withscores=True)
        return [(member.decode(), int(score)) for member, score in rows]

    def _rows(self, job_ids: list[str], fields: tuple[str, ...] = ()) -> list[dict[bytes, bytes]]:
        """The hashes of `job_ids` (an empty dict for a missing one): every field, or only `fields` and the schema,
        which every record has (List and Fleet read what they show, never the plan)."""
        pipe = self.redis.pipeline(transaction=False)
        names = ("schema", *[f for f in fields if f != "schema"]) if fields else ()
        for job_id in job_ids:
            if names:
                pipe.hmget(job_key(job_id), names)
            else:
                pipe.hgetall(job_key(job_id))
        rows = pipe.execute()
        if not names:
            return rows  # type: ignore[no-any-return]
        encoded = [f.encode() for f in names]
        return [{} if row[0] is None else {n: v for n, v in zip(encoded, row, strict=True) if v is not None}
                for row in rows]

    def queued(self, job_ids: list[str]) -> list[str]:
        """Those of `job_ids` still waiting: QUEUED (in a queue, or in a retry backoff)."""
        pipe = self.redis.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hget(job_key(job_id), "phase")
        return [j for j, phase in zip(job_ids, pipe.execute(), strict=True)
                if phase is not None and int(phase) == progress_pb2.PHASE_QUEUED]

    def yielding_to(self, running_job_ids: list[str]) -> dict[str, tuple[str, str]]:
        """waiting job id -> (the running job asked to yield its host to it, why: preemption or reclaim), for the
        running jobs given."""
        pipe = self.redis.pipeline(transaction=False)
        for job_id in running_job_ids:
            pipe.hmget(job_key(job_id), ["preempted_for", "preempt_kind"])
        return {waiter.decode(): (job_id, kind.decode() if kind else PREEMPTION)
                for job_id, (waiter, kind) in zip(running_job_ids, pipe.execute(), strict=True) if waiter}

    def phase_counts(self, newest: int) -> tuple[dict[int, int], int]:
        """Of the `newest` jobs: how many are in each phase, and how many events they wrote in all."""
        ids = [m.decode() for m in self.redis.zrevrange(JOBS_INDEX, 0, newest - 1)]
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(job_key(job_id), ["phase", "last_sequence"])
        by_phase = dict.fromkeys(progress_pb2.Phase.values(), 0)
        written = 0
        for phase, last_sequence in pipe.execute() if ids else []:
            if phase is not None:
                by_phase[int(phase)] += 1
                written += int(last_sequence or 0)
        return by_phase, written


@dataclass(frozen=True)
class PageCursor:
    """Where a List page ended: the submit millisecond of the last entry read, and how many entries of that
    millisecond were read. It names no job, so a page token cannot carry another team's job id."""

    ms: int
    skip: int

    def past(self, ms: int) -> PageCursor:
        """The cursor once the next entry, submitted at `ms`, is read."""
        return PageCursor(ms, self.skip + 1 if ms == self.ms else 1)


def encode_page_token(cursor: PageCursor) -> str:
    return f"{cursor.ms}:{cursor.skip}"


def decode_page_token(token: str) -> PageCursor | None:
    if not token:
        return None
    ms, sep, skip = token.partition(":")
    cursor = (parse_count(ms), parse_count(skip)) if sep else (None, None)
    if cursor[0] is None or cursor[1] is None:
        raise PlanError("page_token", "is not a token this service issued; pass next_page_token from the last "
                                      "ListResponse, or leave it empty for the first page")
    return PageCursor(cursor[0], cursor[1])


def watched(connection: Any, job_id: str, step: Callable[[Any, JobRecord], T]) -> T:
    """`step` on the job's record, read under WATCH: it returns at once (nothing to write), or puts the pipeline in
    MULTI, queues its writes and executes them; all again from the start when the record changed meanwhile."""
    key = job_key(job_id)
    while True:
        with connection.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key)
                return step(pipe, JobRecord.parse(job_id, pipe.hgetall(key)))
            except redis.WatchError:
                continue

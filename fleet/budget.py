"""A team's monthly budget, held in Redis transactions: what a new or moved job commits is checked against the
team's month (spent, plus what its open jobs may still spend) in the same transaction that commits it, so
concurrent Submits cannot pass the budget together; and a running job that passes its budgeted hold is asked to
checkpoint and stop once its team's exposure would pass the budget.

The money figures are the fleet's own (executor.service.pricing), never the caller's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.exceptions import WatchError
from tunefleet.v1 import progress_pb2

from fleet.errors import OverBudgetError
from fleet.jobs import RUNNING_PHASES, JobStore, now_ms
from fleet.keys import job_key, spend_key, team_jobs_key
from fleet.ledger import month_of
from fleet.record import JobRecord, field_names

# A job's record fields a budget reads: whether it ended, what it committed, what its ended holds were charged, and
# (for a running one) what its open hold costs so far.
_COMMIT_FIELDS = field_names("phase", "cost_high_usd", "spent_usd", "started_at_ms", "gpus", "nodes",
                             "price_usd_per_gpu_hour", "budget_stop")
_ENDED = frozenset({progress_pb2.PHASE_DONE, progress_pb2.PHASE_FAILED, progress_pb2.PHASE_CANCELLED})


@dataclass(frozen=True)
class BudgetRule:
    """A team's monthly budget, which a job must fit."""

    team: str
    monthly_budget_usd: float


@dataclass(frozen=True)
class Exposure:
    """What a team's month holds: charged, and what its open jobs may still spend (each at least its open hold)."""

    spent_usd: float
    committed_usd: float

    @property
    def total_usd(self) -> float:
        return self.spent_usd + self.committed_usd


def open_hold_usd(record: JobRecord, at_ms: int) -> float:
    """What a running job's open hold costs by `at_ms`: GPU-seconds held × its price (fleet.ledger charges the same
    when the hold ends)."""
    start_ms = record.started_at_ms
    if not start_ms or record.phase not in RUNNING_PHASES or at_ms <= start_ms:
        return 0.0
    return (at_ms - start_ms) / 1000 * record.total_gpus / 3600 * record.price_usd_per_gpu_hour


def job_exposure_usd(record: JobRecord, at_ms: int) -> float:
    """What an open job may still take from its team's month: the rest of its commitment (its priced upper bound less
    what it was charged), or, past it, what its open hold costs already."""
    committed = max(0.0, record.cost_high_usd - record.spent_usd)
    return max(committed, open_hold_usd(record, at_ms))


def _open_jobs(reader: Any, team: str, at_ms: int, leave_out: str = "") -> tuple[float, list[JobRecord | None]]:
    """The team's month's charges and its jobs that may not have ended, each with its record (read in one round trip,
    fleet.jobs.JobStore.records), through `reader`: a connection, or a pipeline in WATCH mode, whose reads run at
    once; `leave_out` names a job whose commitment the caller replaces (a Move)."""
    spent = float(reader.hget(spend_key(month_of(at_ms)), f"{team}:usd") or 0)
    ids = sorted(m.decode() for m in reader.smembers(team_jobs_key(team)) if m.decode() != leave_out)
    return spent, JobStore(reader).read(ids, _COMMIT_FIELDS)


def _exposure_of(spent_usd: float, jobs: list[JobRecord | None], at_ms: int) -> Exposure:
    return Exposure(spent_usd, sum(job_exposure_usd(record, at_ms) for record in jobs
                                   if record and record.phase not in _ENDED))


def exposure(reader: Any, team: str, at_ms: int, leave_out: str = "") -> Exposure:
    """The team's month at `at_ms` (see _open_jobs for `reader` and `leave_out`)."""
    return _exposure_of(*_open_jobs(reader, team, at_ms, leave_out), at_ms)


def watched_keys(team: str, at_ms: int) -> tuple[str, str]:
    """What a budget check reads that another writer may change before its transaction commits: the team's set of
    open jobs (every Submit adds to it) and its month's charges (every ended hold adds to them)."""
    return team_jobs_key(team), spend_key(month_of(at_ms))


def check(rule: BudgetRule, now: Exposure, cost_high_usd: float, month: str) -> None:
    """OverBudgetError when a job whose priced upper bound is `cost_high_usd` would take the team past its budget."""
    total = now.total_usd + cost_high_usd
    if total > rule.monthly_budget_usd:
        raise OverBudgetError(
            f"team {rule.team}: spent ${now.spent_usd:,.2f} + committed ${now.committed_usd:,.2f} + this job "
            f"${cost_high_usd:,.2f} (the upper end of its cost as the fleet predicts it) = ${total:,.2f}, over its "
            f"${rule.monthly_budget_usd:,.2f} budget for {month}; cancel queued jobs, wait for next month, or ask an "
            "admin to submit it with override_budget")


def check_in(pipe: Any, rule: BudgetRule, cost_high_usd: float, leave_out: str = "") -> None:
    """Watch the team's budget keys on `pipe` (before its MULTI) and check the job against what they hold: the
    caller's EXEC then fails (WatchError) if another Submit or a charge changed them, and the caller checks again."""
    at_ms = now_ms()
    pipe.watch(*watched_keys(rule.team, at_ms))
    check(rule, exposure(pipe, rule.team, at_ms, leave_out), cost_high_usd, month_of(at_ms))


def prune_ended(connection: Any, team: str) -> None:
    """Forget the team's jobs that ended (outside any transaction: a check never writes the keys it watches)."""
    ids = [m.decode() for m in connection.smembers(team_jobs_key(team))]
    ended = [job_id for job_id, record in zip(ids, JobStore(connection).read(ids, _COMMIT_FIELDS), strict=True)
             if not record or record.phase in _ENDED]
    if ended:
        connection.srem(team_jobs_key(team), *ended)


def over_budget_running(connection: Any, rule: BudgetRule, at_ms: int) -> list[tuple[str, str]]:
    """(job id, why) for each running job of the team that has passed its budgeted hold while the team's exposure
    passes its budget, and has not been asked to stop yet. The longest over first: stopping it may be enough."""
    spent, jobs = _open_jobs(connection, rule.team, at_ms)
    now = _exposure_of(spent, jobs, at_ms)
    if now.total_usd <= rule.monthly_budget_usd:
        return []
    over = []
    for record in jobs:
        if not record or record.budget_stop:
            continue
        hold, budgeted = open_hold_usd(record, at_ms), record.cost_high_usd
        if hold + record.spent_usd > budgeted:
            why = (f"stopped by the fleet at ${hold:,.2f} of GPU time, past the ${budgeted:,.2f} it was budgeted: "
                   f"team {rule.team}'s month (spent ${now.spent_usd:,.2f} + open jobs ${now.committed_usd:,.2f}) "
                   f"passes its ${rule.monthly_budget_usd:,.2f} budget; resubmit it next month, or ask an admin to "
                   "with override_budget")
            over.append((hold - budgeted, record.job_id, why))
    return [(job_id, why) for _, job_id, why in sorted(over, reverse=True)]


def ask_to_stop(connection: Any, job_id: str, why: str) -> bool:
    """Ask a running job's holder to checkpoint and stop for its team's budget (its worker ends it CANCELLED with the
    reason); False when it no longer runs."""
    key = job_key(job_id)
    with connection.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(key)
                phase = pipe.hget(key, "phase")
                if phase is None or int(phase) not in RUNNING_PHASES:
                    return False
                pipe.multi()
                pipe.hset(key, "budget_stop", why)
                pipe.execute()
                return True
            except WatchError:
                continue

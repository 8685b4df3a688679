"""What the fleet keeps, and for how long: Submits per caller and per team are rate-limited, a team's stored job
records are capped in number and bytes, and a finished job's record is deleted once it has been finished for the
retention period (its ledger entries and audit lines keep what accounting and audit need). Together they bound what
a Submit + Cancel loop can make Redis hold.

Keys (fleet.keys): `finished` (job id -> when it finished, ms: the publish script adds a job as its terminal event
lands), `team-records:<team>` (job id -> its stored bytes) and `team-bytes` (team -> its records' bytes), and one
counter per owner and minute for the rate limits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from common.errors import QuotaError
from fleet.keys import FINISHED, JOBS_INDEX, TEAM_BYTES, events_key, job_key, rate_key, team_records_key

log = structlog.get_logger("fleet.retention")
# A finished job's record is kept this long after it finished: a month of `tunefleet jobs` history (its holds stay in
# the ledger's stream and the month's totals, its Submit and Cancel in the audit log).
DEFAULT_RETENTION_S = 30 * 24 * 3600
# Per minute: a person submits a few, a sweep of a platform tens; a loop thousands.
DEFAULT_SUBMITS_PER_MINUTE_PER_CALLER = 120
DEFAULT_SUBMITS_PER_MINUTE_PER_TEAM = 600
# A team's stored records (queued, running and finished within the retention), and their bytes: a month of 600 jobs
# a day at up to 10 KB each, a plan being 2-10 KB serialized and at most 64 KB.
DEFAULT_MAX_RECORDS_PER_TEAM = 20_000
DEFAULT_MAX_STORED_BYTES_PER_TEAM = 256 * 1024 * 1024
# What a job record holds besides its plan (ids, times, its last event and Feedback), counted against its team's bytes.
RECORD_OVERHEAD_BYTES = 2048
# Records one sweep deletes at most (one sweep's work stays small however much expired at once).
EXPIRE_BATCH = 500


@dataclass(frozen=True)
class Quotas:
    """The limits above, as a server is configured (0: no limit)."""

    submits_per_minute_per_caller: int = DEFAULT_SUBMITS_PER_MINUTE_PER_CALLER
    submits_per_minute_per_team: int = DEFAULT_SUBMITS_PER_MINUTE_PER_TEAM
    max_records_per_team: int = DEFAULT_MAX_RECORDS_PER_TEAM
    max_stored_bytes_per_team: int = DEFAULT_MAX_STORED_BYTES_PER_TEAM
    retention_s: int = DEFAULT_RETENTION_S
    rate_window_s: int = 60  # the Submit limits count per this many seconds


def check_rate(connection: Any, quotas: Quotas, principal: str, team: str, now_s: float) -> None:
    """Count a Submit against its caller's and team's window; QuotaError (and nothing counted) when either would pass
    its limit."""
    window_s = quotas.rate_window_s
    window = int(now_s // window_s)
    limits = (("principal", principal, quotas.submits_per_minute_per_caller),
              ("team", team, quotas.submits_per_minute_per_team))
    pipe = connection.pipeline(transaction=False)
    for kind, name, _ in limits:
        pipe.incr(rate_key(f"{kind}:{name}", window))
        pipe.expire(rate_key(f"{kind}:{name}", window), 2 * window_s)
    counts = pipe.execute()[::2]
    for (kind, name, limit), count in zip(limits, counts, strict=True):
        if limit and count > limit:
            for other_kind, other_name, _ in limits:  # a refused Submit is not counted
                connection.decr(rate_key(f"{other_kind}:{other_name}", window))
            retry_s = window_s - int(now_s) % window_s
            raise QuotaError(f"submit:{kind}:{name}", f"{kind} {name} has submitted {limit} jobs in {window_s} s, "
                                                      f"the most one {kind} may; retry in {retry_s} s")


def check_stored(connection: Any, quotas: Quotas, team: str, new_bytes: int) -> None:
    """QuotaError when one more record of `new_bytes` would take the team past its stored records or bytes."""
    records = int(connection.hlen(team_records_key(team)))
    stored = int(connection.hget(TEAM_BYTES, team) or 0)
    days = quotas.retention_s / 86_400
    if quotas.max_records_per_team and records >= quotas.max_records_per_team:
        raise QuotaError(f"records:team:{team}", f"team {team} has {records:,} job records stored, the most a team may "
                                                 f"keep; finished jobs' records are deleted {days:g} days after they "
                                                 "finish")
    if quotas.max_stored_bytes_per_team and stored + new_bytes > quotas.max_stored_bytes_per_team:
        raise QuotaError(f"bytes:team:{team}",
                         f"team {team}'s job records hold {stored / 2**20:,.1f} MiB, and this one would pass its "
                         f"{quotas.max_stored_bytes_per_team / 2**20:,.0f} MiB; finished jobs' records are deleted "
                         f"{days:g} days after they finish, or trim the plan (a plan is 2-10 KB)")


def record_stored(pipe: Any, team: str, job_id: str, stored_bytes: int) -> None:
    """Count a new record against its team (inside the Submit's transaction)."""
    pipe.hset(team_records_key(team), job_id, stored_bytes)
    pipe.hincrby(TEAM_BYTES, team, stored_bytes)


def expire_finished(connection: Any, retention_s: int, now_ms: int, batch: int = EXPIRE_BATCH) -> list[str]:
    """Delete the records (and what is left of the event streams) of jobs finished more than `retention_s` ago,
    oldest first, at most `batch`; their teams' counts go down with them. Returns the ids deleted."""
    due = [m.decode() for m in connection.zrangebyscore(FINISHED, "-inf", now_ms - retention_s * 1000, start=0,
                                                          num=batch)]
    deleted = []
    for job_id in due:
        team = (connection.hget(job_key(job_id), "team") or b"").decode()
        with connection.pipeline(transaction=True) as pipe:
            stored = connection.hget(team_records_key(team), job_id)
            pipe.delete(job_key(job_id), events_key(job_id))
            pipe.zrem(JOBS_INDEX, job_id)
            pipe.zrem(FINISHED, job_id)
            pipe.hdel(team_records_key(team), job_id)
            if stored is not None:
                pipe.hincrby(TEAM_BYTES, team, -int(stored))
            pipe.execute()
        deleted.append(job_id)
    if deleted:
        log.info("jobs.expired", count=len(deleted), retention_s=retention_s)
    return deleted

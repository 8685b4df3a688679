"""What the fleet's GPUs cost, measured: every time a job leaves its host (done, failed, cancelled, given back, or
its host lost) the hold is charged — GPU-seconds held × the job's price per GPU-hour — and split into useful and
lost: a failed run's time is lost; a hold that ended before its job did keeps only the steps up to its last
complete checkpoint (the steps after it are run again), in proportion to the steps it ran. A cancelled job's time
was the team's choice, not a loss.

One entry per hold in a capped Redis stream (the usage reports read it by time: entry ids are milliseconds), the
month's totals per team in a hash (budgets read it), and the job's own totals on its record. Writes go into the
caller's transaction where it has one, so a hold is charged exactly when it ends."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from tunefleet.v1 import progress_pb2

from fleet import durability
from fleet.fairshare import charge_usage
from fleet.jobs import watched
from fleet.keys import HOLD_MODEL, LEDGER_STREAM, job_key, spend_key
from fleet.record import JobRecord

# Holds kept for usage reports: ~250 bytes each; a fleet of 1,000 GPUs turning over a job an hour per GPU keeps
# about a month.
LEDGER_MAX_ENTRIES = 1_000_000
# Outcomes of a hold, and what each keeps.
DONE, FAILED, CANCELLED, GIVEN_BACK, HOST_LOST = "done", "failed", "cancelled", "given-back", "host-lost"


def month_of(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m")


@dataclass(frozen=True)
class Charge:
    gpu_seconds: float
    lost_gpu_seconds: float
    usd: float


def charge_of(record: JobRecord, end_ms: int, outcome: str) -> Charge | None:
    """The cost of the hold that ends now, from the job's record; None when no hold is open."""
    start_ms = record.started_at_ms
    if not start_ms or end_ms <= start_ms:
        return None
    gpu_s = (end_ms - start_ms) / 1000 * record.total_gpus
    if outcome == FAILED:
        lost = gpu_s
    elif outcome in (GIVEN_BACK, HOST_LOST):
        last, first = record.last.step, record.hold_from_step
        kept_to = max(first, record.checkpoint_step)
        ran = last - first
        lost = gpu_s if ran <= 0 else gpu_s * max(0, last - kept_to) / ran
    else:
        lost = 0.0
    return Charge(gpu_s, lost, gpu_s / 3600 * record.price_usd_per_gpu_hour)


# A class's hold model: held = start_s + ratio × predicted, fitted by least squares over its complete runs (a hold
# from its claim to DONE: start-up, loading, training, checkpoints), each older run's weight decaying by
# 1 - 1/HOLD_MODEL_RUNS per new one (about the last 50 count); a ratio outside HOLD_RATIO_BOUNDS is a broken
# prediction and is left out.
HOLD_MODEL_RUNS = 50
HOLD_RATIO_BOUNDS = (0.1, 10.0)
_LEARN_HOLD = """
local keep = 1 - 1 / tonumber(ARGV[4])
local x, y = tonumber(ARGV[2]), tonumber(ARGV[3])
local adds = {n = 1, x = x, y = y, xx = x * x, xy = x * y}
for name, add in pairs(adds) do
  local field = ARGV[1] .. ':' .. name
  local v = tonumber(redis.call('HGET', KEYS[1], field) or '0')
  redis.call('HSET', KEYS[1], field, tostring(v * keep + add))
end
"""


@dataclass(frozen=True)
class HoldModel:
    """How long a run of a class holds its host, given its predicted duration: start_s + ratio × predicted."""

    start_s: float = 0.0
    ratio: float = 1.0

    def held_s(self, predicted_s: float) -> float:
        return self.start_s + self.ratio * predicted_s


AS_PREDICTED = HoldModel()  # a class no run has taught yet: a run holds its host for its predicted duration


def hold_models(connection: Any) -> dict[str, HoldModel]:
    """Per GPU class, the hold model its complete runs taught so far (a class without a run is absent): the least
    squares line through (predicted, held); with one predicted duration only, no start-up and the ratio of the
    sums."""
    sums: dict[str, dict[str, float]] = {}
    for name, value in connection.hgetall(HOLD_MODEL).items():
        gpu_class, _, what = name.decode().rpartition(":")
        sums.setdefault(gpu_class, {})[what] = float(value)
    found = {}
    for gpu_class, s in sums.items():
        n, x, y, xx, xy = (s.get(k, 0.0) for k in ("n", "x", "y", "xx", "xy"))
        if n <= 0 or x <= 0:
            continue
        spread = n * xx - x * x
        ratio = (n * xy - x * y) / spread if spread > 1e-9 * n * xx else 0.0
        start_s = (y - ratio * x) / n
        if ratio <= 0 or start_s < 0:  # too few or too alike runs for a line: the ratio of the sums
            ratio, start_s = y / x, 0.0
        found[gpu_class] = HoldModel(start_s, ratio)
    return found


def _learn_hold(pipe: Any, record: JobRecord, end_ms: int) -> None:
    """A run that held its host from its start to DONE teaches its class's hold model."""
    predicted_s, start_ms = record.predicted_s, record.started_at_ms
    if predicted_s <= 0 or not start_ms or record.hold_from_step:
        return
    held_s = (end_ms - start_ms) / 1000
    if HOLD_RATIO_BOUNDS[0] <= held_s / predicted_s <= HOLD_RATIO_BOUNDS[1]:
        pipe.register_script(_LEARN_HOLD)(keys=[HOLD_MODEL], args=[record.gpu_class, predicted_s, held_s,
                                                                   HOLD_MODEL_RUNS], client=pipe)


def charge(pipe: Any, record: JobRecord, outcome: str, end_ms: int | None = None) -> Charge | None:
    """Charge the hold that ends now, inside the caller's transaction (the record read under its WATCH), once: a hold
    already charged (its fence recorded as charged_fence) is not charged again, so a charge that a Redis failover may
    have lost is safely made again (charge_ended, the sweeper's cleanup of an ended job)."""
    if record.fence and record.charged_fence == record.fence:
        return None
    end_ms = end_ms or int(time.time() * 1000)
    cost = charge_of(record, end_ms, outcome)
    if cost is None:
        return None
    team = record.team
    pipe.xadd(LEDGER_STREAM, {"job": record.job_id, "team": team, "class": record.gpu_class,
                              "outcome": outcome, "gpu_s": cost.gpu_seconds, "lost_gpu_s": cost.lost_gpu_seconds,
                              "usd": cost.usd, "start_ms": record.started_at_ms},
              maxlen=LEDGER_MAX_ENTRIES, approximate=True)
    key = job_key(record.job_id)
    pipe.hset(key, "charged_fence", record.fence)
    pipe.hincrbyfloat(key, "spent_usd", cost.usd)
    pipe.hincrbyfloat(key, "gpu_seconds", cost.gpu_seconds)
    pipe.hincrbyfloat(key, "lost_gpu_seconds", cost.lost_gpu_seconds)
    month = spend_key(month_of(end_ms))
    pipe.hincrbyfloat(month, f"{team}:usd", cost.usd)
    pipe.hincrbyfloat(month, f"{team}:gpu_s", cost.gpu_seconds)
    pipe.hincrbyfloat(month, f"{team}:lost_gpu_s", cost.lost_gpu_seconds)
    charge_usage(pipe, team, cost.gpu_seconds, end_ms / 1000)
    if outcome == DONE:
        _learn_hold(pipe, record, end_ms)
    return cost


OUTCOME_OF_PHASE = {progress_pb2.PHASE_DONE: DONE, progress_pb2.PHASE_FAILED: FAILED,
                    progress_pb2.PHASE_CANCELLED: CANCELLED}


def charge_ended(connection: Any, job_id: str, end_ms: int | None = None, fence: int = 0) -> Charge | None:
    """Charge the hold of a job its holder (of `fence`, when given) has just ended with a terminal phase, once
    (charge), and confirm it on a replica (fleet.durability; NotReplicatedError: it may be made again). Nothing when
    the job is not ended, or has moved on from that holder."""
    def step(pipe: Any, record: JobRecord) -> tuple[bool, Charge | None]:
        outcome = OUTCOME_OF_PHASE.get(record.phase)
        if outcome is None or (fence and record.fence != fence):
            return False, None
        pipe.multi()
        cost = charge(pipe, record, outcome, end_ms)
        durability.execute_stamped(connection, pipe)
        return True, cost
    wrote, cost = watched(connection, job_id, step)
    if wrote:
        durability.confirm(connection, "ledger charge")
    return cost


class Ledger:
    """Reads of the ledger: a team's month, a class's hold model, the holds of a period (what a team's open jobs may
    still spend: fleet.budget)."""

    def __init__(self, connection: redis.Redis) -> None:
        self.redis: Any = connection  # redis-py's stubs type replies as unions of every RESP type

    def spent_usd(self, team: str, month: str) -> float:
        return float(self.redis.hget(spend_key(month), f"{team}:usd") or 0)

    def month_totals(self, month: str) -> dict[str, dict[str, float]]:
        """team -> {usd, gpu_s, lost_gpu_s} for the month."""
        totals: dict[str, dict[str, float]] = defaultdict(dict)
        for field, value in self.redis.hgetall(spend_key(month)).items():
            team, _, what = field.decode().rpartition(":")
            totals[team][what] = float(value)
        return dict(totals)

    def hold_model(self, gpu_class: str) -> HoldModel:
        """The class's hold model (as predicted until a complete run of it teaches one)."""
        return hold_models(self.redis).get(gpu_class, AS_PREDICTED)

    def holds(self, since_ms: int, count: int) -> list[dict[str, str]]:
        """Charged holds that ended since `since_ms`, oldest first, at most `count`."""
        rows = self.redis.xrange(LEDGER_STREAM, min=f"{since_ms}-0", max="+", count=count)
        out = []
        for entry_id, fields in rows:
            row = {k.decode(): v.decode() for k, v in fields.items()}
            row["end_ms"] = entry_id.decode().partition("-")[0]
            out.append(row)
        return out

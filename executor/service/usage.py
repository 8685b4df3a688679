"""Usage: the ledger's charged holds (fleet.ledger) summed by job, team, GPU class or day — what `tunefleet usage`
prints and the dashboard would chart. Pure over the holds read."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from tunefleet.v1 import executor_pb2

GROUP_FIELD = {executor_pb2.USAGE_GROUPING_JOB: "job", executor_pb2.USAGE_GROUPING_TEAM: "team",
               executor_pb2.USAGE_GROUPING_GPU_CLASS: "class"}
DEFAULT_SINCE_DAYS = 30
MAX_SINCE_DAYS = 400
# Holds one Usage call reads at most (the ledger keeps fleet.ledger.LEDGER_MAX_ENTRIES); a report past it says so.
MAX_HOLDS_READ = 200_000


def _key(hold: dict[str, str], group_by: int) -> str:
    if group_by == executor_pb2.USAGE_GROUPING_DAY:
        return datetime.fromtimestamp(int(hold["end_ms"]) / 1000, UTC).strftime("%Y-%m-%d")
    return hold.get(GROUP_FIELD.get(group_by, "team"), "")


def _add(row: executor_pb2.UsageRow, hold: dict[str, str]) -> None:
    gpu_s, lost_s = float(hold.get("gpu_s", 0)), float(hold.get("lost_gpu_s", 0))
    row.gpu_seconds += gpu_s
    row.lost_gpu_seconds += lost_s
    row.useful_gpu_seconds += gpu_s - lost_s
    row.cost_usd += float(hold.get("usd", 0))
    row.holds += 1


def aggregate(holds: Iterable[dict[str, str]], group_by: int) -> tuple[list[executor_pb2.UsageRow],
                                                                       executor_pb2.UsageRow]:
    """Rows by key (the most expensive first) and their total."""
    rows: dict[str, executor_pb2.UsageRow] = {}
    total = executor_pb2.UsageRow(key="total")
    for hold in holds:
        key = _key(hold, group_by)
        _add(rows.setdefault(key, executor_pb2.UsageRow(key=key)), hold)
        _add(total, hold)
    ordered = sorted(rows.values(), key=lambda r: (r.key if group_by == executor_pb2.USAGE_GROUPING_DAY else "",
                                                    -r.cost_usd, -r.gpu_seconds, r.key))
    return ordered, total

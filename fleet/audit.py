"""The fleet's audit log: who cancelled a job, cleared a host, submitted — and who tried to and was refused — one
Redis stream, newest last, capped (oldest entries first out), readable by admins (`tunefleet audit`). Refusals are
sampled per caller and action (one entry per DENIED_SAMPLE_S with how many it stands for), so a flood of refused
calls cannot push the fleet's real history out of the cap."""

from __future__ import annotations

import time
from typing import Any

import redis
from google.protobuf import timestamp_pb2
from tunefleet.v1 import executor_pb2

from common.identity import Identity
from common.log import SampledByKind
from fleet.keys import AUDIT_STREAM

# Entries kept: a busy fleet's year of Cancels and host actions, ~200 bytes each (~20 MB at most).
AUDIT_MAX_ENTRIES = 100_000
MAX_DETAIL_CHARS = 1_000
DENIED_SAMPLE_S = 10.0
# (caller, action) pairs whose refusals are sampled before the table starts afresh (a bound on its memory)
_MAX_SAMPLED = 10_000


class AuditLog:
    def __init__(self, connection: redis.Redis) -> None:
        self.redis: Any = connection  # redis-py's stubs type replies as unions of every RESP type
        self._denied = SampledByKind(DENIED_SAMPLE_S, _MAX_SAMPLED)

    def record_denied(self, who: Identity, action: str, target: str, reason: str) -> bool:
        """Record a refused attempt (action `denied:<action>`) with its reason, sampled per caller and action; whether
        an entry was written."""
        count = self._denied.due((who.principal, action))
        if not count:
            return False
        more = f" (and {count - 1} more refused in the last {DENIED_SAMPLE_S:g} s)" if count > 1 else ""
        self.record(who, f"denied:{action}", target, reason + more)
        return True

    def record(self, who: Identity, action: str, target: str, detail: str = "", pipeline: Any = None) -> None:
        """Append an entry (inside the caller's transaction when a pipeline is given)."""
        (pipeline or self.redis).xadd(AUDIT_STREAM, {
            "principal": who.principal, "team": who.team, "role": who.role.value, "action": action,
            "target": target, "detail": _bounded(detail), "time_ms": int(time.time() * 1000)},
            maxlen=AUDIT_MAX_ENTRIES, approximate=True)

    def newest(self, limit: int) -> list[executor_pb2.AuditEntry]:
        """The last `limit` entries, oldest first."""
        entries = []
        for entry_id, fields in reversed(self.redis.xrevrange(AUDIT_STREAM, count=limit)):
            text = {k.decode(): v.decode() for k, v in fields.items()}
            at = timestamp_pb2.Timestamp()
            at.FromMilliseconds(int(text.get("time_ms", "0")))
            entries.append(executor_pb2.AuditEntry(
                id=entry_id.decode(), time=at, principal=text.get("principal", ""), team=text.get("team", ""),
                role=text.get("role", ""), action=text.get("action", ""), target=text.get("target", ""),
                detail=text.get("detail", "")))
        return entries


def _bounded(detail: str) -> str:
    """The detail, or its start with how much was left out (never cut silently)."""
    if len(detail) <= MAX_DETAIL_CHARS:
        return detail
    return f"{detail[:MAX_DETAIL_CHARS]}… ({len(detail) - MAX_DETAIL_CHARS:,} more characters)"

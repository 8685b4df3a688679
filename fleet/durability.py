"""Durable acknowledgements: a write the fleet makes a promise on is held by a replica before anyone is told.

Redis replicates asynchronously, so a write the primary acknowledged may be missing from the replica Sentinel
promotes when the primary dies. The promises the fleet makes — a Submit (or Cancel, Move, ClearHost) that answered
OK, the audit entries those write, a claim's new fence, a published event (a checkpoint's seal record, a terminal
event, whatever a Watch has shown), a ledger charge — are confirmed with WAIT before the RPC answers or the worker
goes on: `wait_replicas` replicas (fleet.redis_url; 0 turns it off) must acknowledge everything the primary took
up to then, within `wait_timeout_ms`.

Two forms, one rule:
- `confirm(connection, what)` after a transaction (MULTI/EXEC) has returned: one more write (a counter) and WAIT on
  one connection, so the replicas acknowledge the replication stream up to after the transaction. It runs without
  retries: after a dropped connection it cannot know which server it reached, so it says NotReplicatedError;
- `pipelined(connection, what, queue)` for Lua writes: the writes and WAIT go in one pipeline on one connection, so
  the answer is about those writes on the server that ran them (redis-py replays the whole pipeline after a lost
  connection: on the promoted replica, where the claim or publish runs again and is confirmed there).

When fewer replicas acknowledge in time, NotReplicatedError (a redis.ConnectionError: every caller already treats
an unreachable Redis): the service answers UNAVAILABLE and the client retries (Submit with the same plan is
idempotent), the worker keeps its events in its backlog and publishes them again (the stream's ids make that
harmless), a claim is given up before the run starts. The count is exported (NOT_REPLICATED).

Limit: WAIT is not consensus. With several replicas, Sentinel promotes the one with the newest replication offset
(among those of equal priority), which holds every confirmed write when `wait_replicas` is at least the number of
replicas that may lose a race to it; a transaction's confirmation is about the primary it reached, so a process
stalled between its EXEC and its confirm for longer than a whole failover can be told yes for a write that was lost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
import structlog
from prometheus_client import Counter

from fleet.keys import DURABLE_MARK

log = structlog.get_logger("fleet.durability")
NOT_REPLICATED = Counter("tunefleet_redis_not_replicated_total",
                         "Promise writes that fewer replicas than wait_replicas acknowledged in time (answered "
                         "UNAVAILABLE, or kept and written again)", ["what"])


class NotReplicatedError(redis.ConnectionError):
    """A promise write was not acknowledged by enough replicas in time: as if Redis were unreachable. `replies`: the
    writes' own answers, from the primary (a pipelined write), or none."""

    replies: list[Any] = []  # noqa: RUF012 (set per instance by _refuse)


def _settings(connection: Any) -> tuple[int, int]:
    address = getattr(connection, "address", None)  # a fleet.connection.FleetRedis; a bare client waits for none
    return (address.wait_replicas, address.wait_timeout_ms) if address is not None else (0, 0)


def confirm(connection: Any, what: str) -> None:
    """Everything the primary took before this call is held by the replicas asked for (module docstring)."""
    replicas, timeout_ms = _settings(connection)
    if not replicas:
        return
    with connection.without_retries().pipeline(transaction=False) as pipe:
        pipe.incr(DURABLE_MARK)
        pipe.wait(replicas, timeout_ms)
        try:
            acked = pipe.execute()[-1]
        except (redis.ConnectionError, redis.TimeoutError) as e:
            _refuse(what, f"could not confirm it on the primary ({e})")
        except redis.ResponseError as e:  # a demoted primary (READONLY): the write may not survive
            _refuse(what, f"the server it reached is no longer the primary ({e})")
    if acked < replicas:
        _refuse(what, f"{acked} of {replicas} replica(s) acknowledged it within {timeout_ms} ms")


def pipelined(connection: Any, what: str, queue: Callable[[Any], None]) -> list[Any]:
    """Run the writes `queue` puts on a pipeline, then WAIT on the same connection; their replies (without WAIT's).
    NotReplicatedError when too few replicas acknowledged them in time."""
    replicas, timeout_ms = _settings(connection)
    with connection.pipeline(transaction=False) as pipe:
        queue(pipe)
        if replicas:
            pipe.wait(replicas, timeout_ms)
        replies: list[Any] = pipe.execute()
    if not replicas:
        return replies
    if replies[-1] < replicas:
        _refuse(what, f"{replies[-1]} of {replicas} replica(s) acknowledged it within {timeout_ms} ms", replies[:-1])
    return replies[:-1]


def _refuse(what: str, why: str, replies: list[Any] | None = None) -> None:
    NOT_REPLICATED.labels(what).inc()
    log.warning("redis.not_replicated", what=what, why=why)
    error = NotReplicatedError(f"the fleet's Redis did not confirm the {what} on a replica: {why}; nothing was "
                               "promised, retry shortly (it is safe to retry)")
    error.replies = replies or []
    raise error


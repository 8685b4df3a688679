"""Durable acknowledgements: a write the fleet makes a promise on is held by a replica before anyone is told.

Redis replicates asynchronously, so a write the primary acknowledged may be missing from the replica Sentinel
promotes when the primary dies. The promises the fleet makes — a Submit (or Cancel, Move, ClearHost) that answered
OK, the audit entries those write, a claim's new fence, a published event (a checkpoint's seal record, a terminal
event, whatever a Watch has shown), a ledger charge — are confirmed with WAIT before the RPC answers or the worker
goes on: `wait_replicas` replicas (fleet.redis_url; 0 turns it off) must acknowledge everything the primary took
up to then, within `wait_timeout_ms`.

Two forms, one rule:
- `confirm(connection, what)` after a transaction (MULTI/EXEC) has returned: one more write (a counter), WAIT and
  the server's run id on one connection, so the replicas acknowledge the replication stream up to after the
  transaction. A transaction executed by `execute_stamped` (its server's run id read inside it) is
  confirmed only on that same server: an old primary that woke from a pause still taking writes, before the
  sentinels demote it, would otherwise have its write confirmed by the new primary's replica, and lose it. The
  confirmation runs without retries: after a dropped connection it cannot know which server it reached;
- `pipelined(connection, what, queue)` for Lua writes: the writes and WAIT go in one pipeline on one connection, so
  the answer is about those writes on the server that ran them (redis-py replays the whole pipeline after a lost
  connection: on the promoted replica, where the claim or publish runs again and is confirmed there).

When fewer replicas acknowledge in time, NotReplicatedError (a redis.ConnectionError: every caller already treats
an unreachable Redis): the service answers UNAVAILABLE and the client retries (Submit with the same plan is
idempotent), the worker keeps its events in its backlog and publishes them again (the stream's ids make that
harmless), a claim is given up before the run starts. The count is exported (NOT_REPLICATED).

Limit: WAIT is not consensus. With several replicas, Sentinel promotes the one with the newest replication offset
(among those of equal priority), which holds every confirmed write when `wait_replicas` is at least the number of
replicas that may lose a race to it. A write that is not stamped (an audit entry of a refused call, a host cleared)
is confirmed on whichever primary the confirmation reaches.
"""

from __future__ import annotations

import threading
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


_stamped = threading.local()  # the run id of the server that ran this thread's last stamped transaction


class NotReplicatedError(redis.ConnectionError):
    """A promise write was not acknowledged by enough replicas in time: as if Redis were unreachable. `replies`: the
    writes' own answers, from the primary (a pipelined write), or none."""

    replies: list[Any] = []  # noqa: RUF012 (set per instance by _refuse)


def _settings(connection: Any) -> tuple[int, int]:
    address = getattr(connection, "address", None)  # a fleet.connection.FleetRedis; a bare client waits for none
    return (address.wait_replicas, address.wait_timeout_ms) if address is not None else (0, 0)


def execute_stamped(connection: Any, pipe: Any) -> list[Any]:
    """Execute a transaction (its writes queued after MULTI) whose writes are to be confirmed: it reads which server
    runs it, and the next confirm in this thread must reach that server. The transaction's own replies."""
    if not _settings(connection)[0]:
        return list(pipe.execute())
    pipe.execute_command("INFO", "server")
    replies = list(pipe.execute())
    _stamped.run_id = replies[-1]["run_id"]
    return replies[:-1]


def found_on(connection: Any, pipe: Any) -> None:
    """A transaction that found its write already made (a Submit retried) and writes nothing: the next confirm in this
    thread must reach the server that answered (`pipe` is watching: the command runs at once, on its connection)."""
    if _settings(connection)[0]:
        _stamped.run_id = pipe.execute_command("INFO", "server")["run_id"]


def confirm(connection: Any, what: str) -> None:
    """Everything the primary took before this call is held by the replicas asked for (module docstring)."""
    replicas, timeout_ms = _settings(connection)
    expected, _stamped.run_id = getattr(_stamped, "run_id", None), None
    if not replicas:
        return
    with connection.without_retries().pipeline(transaction=False) as pipe:
        pipe.incr(DURABLE_MARK)
        pipe.wait(replicas, timeout_ms)
        pipe.execute_command("INFO", "server")
        try:
            _, acked, server = pipe.execute()
        except (redis.ConnectionError, redis.TimeoutError) as e:
            _refuse(what, f"could not confirm it on the primary ({e})")
        except redis.ResponseError as e:  # a demoted primary (READONLY): the write may not survive
            _refuse(what, f"the server it reached is no longer the primary ({e})")
    if expected is not None and server["run_id"] != expected:
        _refuse(what, "the server that took it is no longer the primary (a failover happened meanwhile)")
    _verify(connection, what, acked, server["run_id"])


def pipelined(connection: Any, what: str, queue: Callable[[Any], None]) -> list[Any]:
    """Run the writes `queue` puts on a pipeline, then WAIT and the server's run id on the same connection; their
    replies (without those two). NotReplicatedError when too few replicas acknowledged them in time, or the server
    that took them is not the primary the sentinels name (an old primary woken mid-failover)."""
    replicas, timeout_ms = _settings(connection)
    with connection.pipeline(transaction=False) as pipe:
        queue(pipe)
        if replicas:
            pipe.wait(replicas, timeout_ms)
            pipe.execute_command("INFO", "server")
        replies: list[Any] = pipe.execute()
    if not replicas:
        return replies
    own, acked, server = replies[:-2], replies[-2], replies[-1]
    _verify(connection, what, acked, server["run_id"], own)
    return own


def _verify(connection: Any, what: str, acked: int, run_id: str, replies: list[Any] | None = None) -> None:
    """The wait's answer holds: enough replicas acknowledged, and (behind Sentinel) the server `run_id` that took the
    writes is the primary most sentinels name now."""
    replicas, timeout_ms = _settings(connection)
    if acked < replicas:
        _refuse(what, f"{acked} of {replicas} replica(s) acknowledged it within {timeout_ms} ms", replies)
    try:
        primary = connection.primary_run_id()
    except (redis.ConnectionError, redis.TimeoutError) as e:
        _refuse(what, f"the sentinels could not say which server is the primary ({e})", replies)
    if primary and primary != run_id:  # an old primary woken mid-failover, its replica not yet moved away
        _refuse(what, "the server that took it is no longer the primary the sentinels name", replies)


def _refuse(what: str, why: str, replies: list[Any] | None = None) -> None:
    NOT_REPLICATED.labels(what).inc()
    log.warning("redis.not_replicated", what=what, why=why)
    error = NotReplicatedError(f"the fleet's Redis did not confirm the {what} on a replica: {why}; nothing was "
                               "promised, retry shortly (it is safe to retry)")
    error.replies = replies or []
    raise error


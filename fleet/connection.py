"""The fleet's Redis connections: every process rides out a Redis restart, or a Sentinel failover, on its own.

A command that meets a dropped connection is retried with exponential backoff and jitter (redis-py's Retry)
for about the time a Redis restart or a failover takes; past that it raises, and each caller decides (the worker
keeps its run going, a gRPC call answers UNAVAILABLE, a sweep waits for the next). Behind Sentinel
(fleet.redis_url), each new connection asks the sentinels where the primary is now (redis-py's Sentinel
support), so a retry after a failover reaches the promoted replica; a connection to a primary that was demoted
meanwhile fails with READONLY and is retried the same way.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import redis
import structlog
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool, SentinelManagedConnection
from redis.utils import SENTINEL

from fleet.redis_url import RedisAddress, parse_redis_url


@dataclass(frozen=True)
class RetryPolicy:
    retries: int
    cap_s: float
    base_s: float = 0.05


# Services and workers: up to ~20 s of retries (1 s apart at most), longer than a restart of a Redis with a
# few hundred MB of AOF; a caller waits that long at most before it sees the error.
SERVICE_RETRY = RetryPolicy(retries=24, cap_s=1.0)
# A worker answering its run's holder question (executor.worker.holder): about a second at most, so a Redis
# outage never stalls training; the run then writes its events to its file, and the worker publishes them later.
HOLDER_RETRY = RetryPolicy(retries=3, cap_s=0.5)
SOCKET_TIMEOUT_S = 10.0  # a command on a connection that hangs (a Redis paused, a black-holed route)
# A service probes its Redis this often, each probe waiting this long at most, without retries (Reachability).
PROBE_INTERVAL_S = 1.0
PROBE_TIMEOUT_S = 1.0
# Behind Sentinel, a pool asks the sentinels where the primary is at most this often (_SentinelPool).
REDISCOVER_S = 1.0
log = structlog.get_logger("fleet.connection")


# No retries: a probe, or a durable acknowledgement's wait (fleet.durability), answers for one server only.
NO_RETRY = RetryPolicy(retries=0, cap_s=0.0)


class _SentinelConnection(SentinelManagedConnection):
    """redis-py's Sentinel-managed connection with two of its faults worked around (both open upstream as of
    2026-11): a reconnect after a dropped connection goes to the primary the sentinels name now, not the address it
    had (redis/redis-py#3874: a command in flight when the primary died retried the dead one for its ~20 s of
    retries); and a connection whose read failed is dropped, as every other redis-py connection is
    (redis/redis-py#4292: the next command on it got the unread reply, and rq's worker hung at its SIGTERM)."""

    def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        if self._sock is None and self.connection_pool.is_master:
            self.host, self.port = self.connection_pool.get_master_address()
        super().connect_check_health(check_health=check_health, retry_socket_connect=retry_socket_connect)

    def read_response(self, disable_decoding: bool = False, *, timeout: float | object = SENTINEL,
                      disconnect_on_error: bool | None = True, push_request: bool | None = False) -> Any:
        return super().read_response(disable_decoding, timeout=timeout, disconnect_on_error=disconnect_on_error,
                                     push_request=push_request)


class _MajoritySentinel(Sentinel):
    """Where the primary is, as most sentinels say (redis-py takes the first that names one). During a failover one
    sentinel may still name the old primary, which, woken from a pause, answers as a primary until it is demoted:
    a client that believed that one sentinel read the old primary's data and lost its writes."""

    def discover_master(self, service_name: str) -> tuple[str, int]:
        return self.majority(service_name)[0]

    def majority(self, service_name: str) -> tuple[tuple[str, int], str]:
        """The primary's address and run id, as most sentinels name it; MasterNotFoundError when most do not agree."""
        votes: Counter[tuple[tuple[str, int], str]] = Counter()
        errors = []
        for sentinel in self.sentinels:
            try:
                state = sentinel.sentinel_masters().get(service_name)
            except (redis.ConnectionError, redis.TimeoutError) as e:
                errors.append(f"{sentinel}: {e}")
                continue
            if state and self.check_master_state(state, service_name):
                votes[((state["ip"], int(state["port"])), str(state.get("runid", "")))] += 1
        if votes:
            primary, count = votes.most_common(1)[0]
            if count > len(self.sentinels) // 2:
                return primary
        raise MasterNotFoundError(f"no primary for {service_name!r} that most of the {len(self.sentinels)} sentinels "
                                  f"name (votes {dict(votes)}{'; ' + '; '.join(errors) if errors else ''})")


class _SentinelPool(SentinelConnectionPool):
    """Asks the sentinels where the primary is at most every REDISCOVER_S as it hands out connections, and drops a
    connection to any other server. A pool whose connections were all blocked on a paused primary made no new
    connection while the sentinels promoted a replica, so nothing told it; the old primary, woken, answered its
    reads with what it held, and went on doing so as a replica once demoted."""

    _checked_at = 0.0

    def get_connection(self, command_name: str | None = None, *keys: Any, **options: Any) -> Any:
        if time.monotonic() - self._checked_at >= REDISCOVER_S:
            self._checked_at = time.monotonic()
            with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):  # the command finds out itself
                self.get_master_address()
        connection = super().get_connection(command_name, *keys, **options)
        if self.master_address is not None and (connection.host, connection.port) != self.master_address:
            connection.disconnect()  # its command reconnects, to the primary the sentinels name
        return connection


class FleetRedis(redis.Redis):
    """A client of the fleet's Redis that knows its address (its durability settings, its probe's target)."""

    address: RedisAddress = RedisAddress()
    _once: FleetRedis | None = None

    def primary_run_id(self) -> str:
        """Behind Sentinel, the run id of the server most sentinels name the primary now; "" for a plain server."""
        if not self.address.managed:
            return ""
        pool = cast(SentinelConnectionPool, self.connection_pool)
        return cast(_MajoritySentinel, pool.sentinel_manager).majority(self.address.service)[1]

    def without_retries(self) -> FleetRedis:
        """A client of the same Redis that does not retry (one server answers; fleet.durability's confirmations)."""
        if self._once is None:
            self._once = connect(self.address, NO_RETRY, SOCKET_TIMEOUT_S)
        return self._once


def connect(url: str | RedisAddress, policy: RetryPolicy = SERVICE_RETRY,
            timeout_s: float = SOCKET_TIMEOUT_S) -> FleetRedis:
    """A client for the fleet's Redis at `url` (fleet.redis_url; RedisUrlError when it cannot be read) that retries
    through connection loss and follows a Sentinel failover."""
    address = url if isinstance(url, RedisAddress) else parse_redis_url(url)
    retry = Retry(ExponentialWithJitterBackoff(cap=policy.cap_s, base=policy.base_s), policy.retries) \
        if policy.retries else Retry(NoBackoff(), 0)
    kwargs: dict[str, Any] = dict(retry=retry, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                  retry_on_error=[redis.ConnectionError, redis.TimeoutError] if policy.retries else [],
                                  health_check_interval=30)
    client: FleetRedis
    if address.managed:
        sentinels = _MajoritySentinel(list(address.sentinels), sentinel_kwargs=dict(
            socket_timeout=min(timeout_s, PROBE_TIMEOUT_S), socket_connect_timeout=min(timeout_s, PROBE_TIMEOUT_S),
            password=address.sentinel_password))
        client = sentinels.master_for(address.service, redis_class=FleetRedis, connection_pool_class=_SentinelPool,
                                      connection_class=_SentinelConnection, db=address.db,
                                      username=address.username, password=address.password, **kwargs)
    else:
        client = cast(FleetRedis, FleetRedis.from_url(address.url, **kwargs))
    client.address = address
    return client


def reach(connection: redis.Redis) -> None:
    """Raises redis.RedisError when the fleet's Redis cannot be reached (a start-up check)."""
    connection.ping()


class Reachability:
    """Whether the fleet's Redis answers now, from a probe every `interval_s` in the background (one PING on a
    connection of its own, no retries): a service reports NOT_SERVING and refuses calls at once while it does
    not, instead of each call waiting out the retries. Listeners hear every change."""

    def __init__(self, connection: FleetRedis, interval_s: float = PROBE_INTERVAL_S) -> None:
        self._probe = connect(connection.address, NO_RETRY, PROBE_TIMEOUT_S)
        self._interval_s = interval_s
        self.up = True
        self.listeners: list[Callable[[bool], None]] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="redis-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopped.wait(self._interval_s):
            try:
                self._probe.ping()
                up = True
            except redis.RedisError:
                up = False
            if up != self.up:
                self.up = up
                log.warning("fleet.redis_reachable" if up else "fleet.redis_unreachable")
                for listener in self.listeners:
                    listener(up)

    def close(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._interval_s + PROBE_TIMEOUT_S + 1)
        self._probe.close()

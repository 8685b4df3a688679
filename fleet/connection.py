"""The fleet's Redis connections: every process rides out a Redis restart on its own.

A command that meets a dropped connection is retried with exponential backoff and jitter (redis-py's Retry)
for about the time a Redis restart takes with its append-only file loaded; past that it raises, and each
caller decides (the worker keeps its run going, a gRPC call answers UNAVAILABLE, a sweep waits for the next).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
import structlog
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.retry import Retry


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
log = structlog.get_logger("fleet.connection")


def connect(url: str, policy: RetryPolicy = SERVICE_RETRY) -> redis.Redis:
    """A client for the fleet's Redis at `url` that retries through connection loss."""
    return redis.Redis.from_url(
        url, retry=Retry(ExponentialWithJitterBackoff(cap=policy.cap_s, base=policy.base_s), policy.retries),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError], socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=SOCKET_TIMEOUT_S, health_check_interval=30)


def reach(connection: redis.Redis) -> None:
    """Raises redis.RedisError when the fleet's Redis cannot be reached (a start-up check)."""
    connection.ping()


class Reachability:
    """Whether the fleet's Redis answers now, from a probe every `interval_s` in the background (one PING on a
    connection of its own, no retries): a service reports NOT_SERVING and refuses calls at once while it does
    not, instead of each call waiting out the retries. Listeners hear every change."""

    def __init__(self, connection: redis.Redis, interval_s: float = PROBE_INTERVAL_S) -> None:
        kwargs: dict[str, Any] = dict(connection.connection_pool.connection_kwargs)
        kwargs.update(socket_timeout=PROBE_TIMEOUT_S, socket_connect_timeout=PROBE_TIMEOUT_S,
                      retry=Retry(NoBackoff(), 0), retry_on_error=[])
        pool = redis.ConnectionPool(connection_class=connection.connection_pool.connection_class, **kwargs)
        self._probe = redis.Redis(connection_pool=pool)
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

"""The fleet's Redis connections: every process rides out a Redis restart on its own.

A command that meets a dropped connection is retried with exponential backoff and jitter (redis-py's Retry)
for about the time a Redis restart takes with its append-only file loaded; past that it raises, and each
caller decides (the worker keeps its run going, a gRPC call answers UNAVAILABLE, a sweep waits for the next).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis
from redis.backoff import ExponentialWithJitterBackoff
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


def connect(url: str, policy: RetryPolicy = SERVICE_RETRY) -> redis.Redis:
    """A client for the fleet's Redis at `url` that retries through connection loss."""
    return redis.Redis.from_url(
        url, retry=Retry(ExponentialWithJitterBackoff(cap=policy.cap_s, base=policy.base_s), policy.retries),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError], socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=SOCKET_TIMEOUT_S, health_check_interval=30)


def reach(connection: redis.Redis) -> None:
    """Raises redis.RedisError when the fleet's Redis cannot be reached (a start-up check)."""
    connection.ping()

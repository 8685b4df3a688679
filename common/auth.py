"""Bearer-token authentication for both servers, with denied calls logged at a bounded rate."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
import structlog

from common import metrics
from common.bounds import echo

log = structlog.get_logger("tunefleet.auth")
HEALTH_PREFIX = "/grpc.health.v1.Health/"


class Sampled:
    """Counts an event and says when to log it: the first time, then at most once per `interval_s` (with the count
    since the last line), so a flood of denied calls cannot flood the log."""

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._last = -interval_s
        self._count = 0

    def due(self) -> int:
        """0 when not to log now; else how many events this line stands for."""
        with self._lock:
            self._count += 1
            now = time.monotonic()
            if now - self._last < self._interval_s:
                return 0
            self._last, count, self._count = now, self._count, 0
            return count


def caller_id(metadata: object) -> str:
    """Who is calling, as far as a bearer token tells: "token-" and 12 hex digits of its SHA-256 (the token
    itself is never stored or logged), or "anonymous" when the call carries none."""
    given = dict(metadata or ()).get("authorization", "")  # type: ignore[call-overload]
    if not given:
        return "anonymous"
    return "token-" + hashlib.sha256(given.removeprefix("Bearer ").encode()).hexdigest()[:12]


# At most one "denied" log line per this many seconds (with the number of denials it covers).
DENIED_LOG_INTERVAL_S = 10.0


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Rejects calls without `authorization: Bearer <token>` (logged, rate-limited); health checks stay open."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("an empty bearer token would let every call in")
        self._expected = f"Bearer {token}".encode()
        self._denied = Sampled(DENIED_LOG_INTERVAL_S)

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        if details.method.startswith(HEALTH_PREFIX):
            return continuation(details)
        given = dict(details.invocation_metadata or ()).get("authorization", "")
        if hmac.compare_digest(given.encode(), self._expected):
            return continuation(details)
        handler = continuation(details)
        denied = self._denied.due()
        if denied:
            log.warning("rpc.unauthenticated", method=echo(details.method), denied_since_last_line=denied,
                        credentials="none" if not given else "wrong")

        def deny(request: Any, context: grpc.ServicerContext) -> Any:
            # An unknown method is not a label: a client must not grow the metrics without bound.
            metrics.observe_rpc(details.method if handler is not None else "unknown",
                                grpc.StatusCode.UNAUTHENTICATED.name, 0.0)
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token: send "
                                                           "'authorization: Bearer <token>' metadata")
        if handler is not None and handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(deny)
        return grpc.unary_unary_rpc_method_handler(deny)

"""Bearer-token authentication for both servers (tokens looked up among the identities, common.identity), with
denied calls logged at a bounded rate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import structlog

from common import metrics
from common.bounds import echo
from common.errors import UnknownCallerError
from common.identity import UNAUTHENTICATED_ADMIN, Identities, Identity
from common.log import Sampled

log = structlog.get_logger("tunefleet.auth")
HEALTH_PREFIX = "/grpc.health.v1.Health/"


def bearer_token(metadata: object) -> str:
    """The token of `authorization: Bearer <token>` metadata; '' when the call carries none."""
    given = dict(metadata or ()).get("authorization", "")  # type: ignore[call-overload]
    return str(given).removeprefix("Bearer ")


def caller(identities: Identities | None, metadata: object) -> Identity:
    """Who is calling. On a server without authentication every caller is its admin; with it, the interceptor has
    let only known tokens in."""
    if identities is None:
        return UNAUTHENTICATED_ADMIN
    found = identities.lookup(bearer_token(metadata))
    if found is None:  # the file changed since the interceptor's look (a stream's token revoked while it is open)
        raise UnknownCallerError("this token is no longer in the server's identities; ask an admin of the fleet for "
                                 "a new one")
    return found


# At most one "denied" log line per this many seconds (with the number of denials it covers).
DENIED_LOG_INTERVAL_S = 10.0
# What of a refused call's method name is passed on (a client may send any bytes as a method).
MAX_METHOD_CHARS = 200


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Rejects calls whose `authorization: Bearer <token>` is missing or not one of the server's identities (logged,
    rate-limited); health checks stay open. Tokens are compared by their SHA-256 (common.identity)."""

    def __init__(self, identities: Identities,
                 on_denied: Callable[[str, str, int], None] = lambda method, credentials, count: None) -> None:
        self._identities = identities
        self._denied = Sampled(DENIED_LOG_INTERVAL_S)
        self._on_denied = on_denied  # (method, "none" | "wrong", denials it stands for), sampled as the log is

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        if details.method.startswith(HEALTH_PREFIX):
            return continuation(details)
        given = dict(details.invocation_metadata or ()).get("authorization", "")
        if given.startswith("Bearer ") and self._identities.lookup(given.removeprefix("Bearer ")) is not None:
            return continuation(details)
        handler = continuation(details)
        denied = self._denied.due()
        if denied:
            credentials = "none" if not given else "wrong"
            log.warning("rpc.unauthenticated", method=echo(details.method), denied_since_last_line=denied,
                        credentials=credentials)
            self._on_denied(details.method[:MAX_METHOD_CHARS], credentials, denied)

        def deny(request: Any, context: grpc.ServicerContext) -> Any:
            # An unknown method is not a label: a client must not grow the metrics without bound.
            metrics.observe_rpc(details.method if handler is not None else "unknown",
                                grpc.StatusCode.UNAUTHENTICATED.name, 0.0)
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token: send "
                                                           "'authorization: Bearer <token>' metadata (the tunefleet "
                                                           "CLI: --token, TUNEFLEET_TOKEN or --token-file)")
        if handler is not None and handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(deny)
        return grpc.unary_unary_rpc_method_handler(deny)

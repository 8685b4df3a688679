"""gRPC plumbing shared by the planner and executor servers: one error table, request ids, metrics,
bearer-token auth, health, reflection and TLS."""

from __future__ import annotations

import collections
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status

from common import metrics
from common.admission import Admission, StreamGate
from common.auth import HEALTH_PREFIX, BearerTokenInterceptor
from common.bounds import MAX_RECEIVE_MESSAGE_BYTES, MAX_SEND_MESSAGE_BYTES, Bounds, echo
from common.errors import (
    AbandonedError,
    DeniedError,
    ExhaustedError,
    FieldError,
    MissingError,
    PreconditionError,
    QuotaError,
    UnavailableError,
    UnknownCallerError,
)
from common.identity import Identities
from common.threads import DEFAULT_IDLE_S, ElasticThreadPool

log = structlog.get_logger("tunefleet.rpc")
REQUEST_ID_KEY = "x-request-id"
# An error message (and its log line) never grows past this, whatever the request held.
MAX_ERROR_CHARS = 2000


def _status(code: int, message: str, details: list[Any]) -> status_pb2.Status:
    packed = []
    for d in details:
        a = any_pb2.Any()
        a.Pack(d)
        packed.append(a)
    return status_pb2.Status(code=code, message=message, details=packed)


def _short(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else f"{text[:MAX_ERROR_CHARS]}… ({len(text):,} characters)"


def error_status(exc: Exception) -> tuple[status_pb2.Status | None, grpc.StatusCode, str]:
    """The one table from error categories (common.errors) to gRPC status codes."""
    if isinstance(exc, FieldError):
        violation = error_details_pb2.BadRequest.FieldViolation(field=_short(exc.field),
                                                                description=_short(exc.description))
        message = _short(str(exc))
        return (_status(code_pb2.INVALID_ARGUMENT, message,
                        [error_details_pb2.BadRequest(field_violations=[violation])]),
                grpc.StatusCode.INVALID_ARGUMENT, message)
    if isinstance(exc, QuotaError):
        quota = error_details_pb2.QuotaFailure(violations=[error_details_pb2.QuotaFailure.Violation(
            subject=_short(exc.subject), description=_short(str(exc)))])
        return (_status(code_pb2.RESOURCE_EXHAUSTED, _short(str(exc)), [quota]), grpc.StatusCode.RESOURCE_EXHAUSTED,
                _short(str(exc)))
    for category, code, proto_code in ((MissingError, grpc.StatusCode.NOT_FOUND, code_pb2.NOT_FOUND),
                                       (DeniedError, grpc.StatusCode.PERMISSION_DENIED, code_pb2.PERMISSION_DENIED),
                                       (UnknownCallerError, grpc.StatusCode.UNAUTHENTICATED, code_pb2.UNAUTHENTICATED),
                                       (PreconditionError, grpc.StatusCode.FAILED_PRECONDITION,
                                        code_pb2.FAILED_PRECONDITION),
                                       (ExhaustedError, grpc.StatusCode.RESOURCE_EXHAUSTED,
                                        code_pb2.RESOURCE_EXHAUSTED),
                                       (UnavailableError, grpc.StatusCode.UNAVAILABLE, code_pb2.UNAVAILABLE),
                                       (AbandonedError, grpc.StatusCode.CANCELLED, code_pb2.CANCELLED)):
        if isinstance(exc, category):
            return _status(proto_code, _short(str(exc)), []), code, _short(str(exc))
    return None, grpc.StatusCode.INTERNAL, "internal error; the server log has the details"


class _Status(collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status):
    """A status with trailing metadata of our own beside its details."""


# gRFC A6: a negative pushback tells a client's retry policy not to retry (a caller's own quota does not pass soon,
# unlike a server at capacity, which its retries wait out).
NO_RETRY = ("grpc-retry-pushback-ms", "-1")


def abort(context: grpc.ServicerContext, exc: Exception) -> None:
    status, code, message = error_status(exc)
    if status is None:
        log.exception("rpc.internal_error")
        context.abort(code, message)
    else:
        log.info("rpc.rejected", code=code.name, error=message)
        answer = rpc_status.to_status(status)
        if isinstance(exc, QuotaError):
            answer = _Status(answer.code, answer.details, (*answer.trailing_metadata, NO_RETRY))
        context.abort_with_status(answer)


def call_unary(fn: Callable[[Any], Any], request: Any, context: grpc.ServicerContext) -> Any:
    try:
        return fn(request)
    except Exception as exc:  # noqa: BLE001 - every error is mapped or reported as INTERNAL
        abort(context, exc)


def call_stream(fn: Callable[[Any], Iterator[Any]], request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
    try:
        yield from fn(request)
    except Exception as exc:  # noqa: BLE001 - every error is mapped or reported as INTERNAL
        abort(context, exc)


class _Malformed:
    """A request whose bytes did not parse: answered INVALID_ARGUMENT, not gRPC's INTERNAL."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def _lenient(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as e:  # noqa: BLE001 - any parse failure is the client's
            return _Malformed(e)
    return parse


def _code_name(context: grpc.ServicerContext, exc: BaseException | None) -> str:
    code = context.code() if hasattr(context, "code") else None
    if code is not None:
        return code.name
    return "OK" if exc is None else "UNKNOWN"


class RequestContextInterceptor(grpc.ServerInterceptor):
    """Binds a request id (from x-request-id or new) to every log line; counts and times each call; refuses a
    request out of `bounds` (common.bounds) before its handler runs."""

    def __init__(self, bounds: Bounds, admission: Admission, expensive: Mapping[str, str],
                 streams: StreamGate, load: Callable[[], int] = lambda: 0, max_in_flight: int = 0) -> None:
        self._bounds = bounds
        self._admission = admission
        self._streams = streams
        self._expensive = expensive
        self._load, self._max_in_flight = load, max_in_flight

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        handler = continuation(details)
        if handler is None or details.method.startswith(HEALTH_PREFIX):
            return handler
        method = details.method
        if self._max_in_flight and self._load() >= self._max_in_flight:
            # Refused here (counted in the metrics), before gRPC's own limit would refuse it uncounted.
            return _refusal(handler, method, ExhaustedError(
                f"the server is at its limit of {self._max_in_flight} calls in flight; retry with backoff"))
        metadata = dict(details.invocation_metadata or ())
        request_id = metadata.get(REQUEST_ID_KEY) or uuid.uuid4().hex

        def begin(request: Any, context: grpc.ServicerContext) -> None:
            structlog.contextvars.bind_contextvars(request_id=request_id, method=method)
            context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))
            if isinstance(request, _Malformed):
                abort(context, FieldError("request", f"is not a valid request message for {method}: "
                                                     f"{echo(str(request.error), MAX_ERROR_CHARS)}"))
            try:
                self._bounds.check(request)
            except FieldError as e:
                abort(context, e)

        def end(context: grpc.ServicerContext, start: float, exc: BaseException | None) -> None:
            duration_s = time.perf_counter() - start
            metrics.observe_rpc(method, _code_name(context, exc), duration_s)
            log.debug("rpc.done", duration_ms=round(duration_s * 1e3, 3))
            structlog.contextvars.clear_contextvars()

        if handler.unary_unary is not None:
            inner = handler.unary_unary
            pool = self._expensive.get(method.rsplit("/", 1)[-1])

            def unary(request: Any, context: grpc.ServicerContext) -> Any:
                start, exc = time.perf_counter(), None
                try:
                    begin(request, context)
                    if pool is not None:
                        try:
                            return self._admission.run(context, pool, lambda: inner(request, context))
                        except (ExhaustedError, AbandonedError) as e:  # refused or abandoned before it ran
                            abort(context, e)
                    return inner(request, context)
                except BaseException as e:
                    exc = e
                    raise
                finally:
                    end(context, start, exc)

            return grpc.unary_unary_rpc_method_handler(unary,
                                                       request_deserializer=_lenient(handler.request_deserializer),
                                                       response_serializer=handler.response_serializer)
        if handler.unary_stream is not None:
            inner_stream = handler.unary_stream

            def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                start, exc = time.perf_counter(), None
                try:
                    begin(request, context)
                    try:
                        self._streams.enter()
                    except ExhaustedError as e:
                        abort(context, e)
                    try:
                        yield from inner_stream(request, context)
                    finally:
                        self._streams.leave()
                except BaseException as e:
                    exc = e
                    raise
                finally:
                    end(context, start, exc)

            return grpc.unary_stream_rpc_method_handler(stream,
                                                        request_deserializer=_lenient(handler.request_deserializer),
                                                        response_serializer=handler.response_serializer)
        return handler


def _refusal(handler: Any, method: str, error: Exception) -> Any:
    """A handler of `handler`'s kind that answers `error` at once, counted in the metrics."""
    def refuse(request: Any, context: grpc.ServicerContext) -> Any:
        metrics.observe_rpc(method, error_status(error)[1].name, 0.0)
        abort(context, error)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(refuse, request_deserializer=_unread)
    return grpc.unary_unary_rpc_method_handler(refuse, request_deserializer=_unread)


def _unread(data: bytes) -> bytes:
    """A refused call's request is never parsed (None would read as a failed parse to gRPC)."""
    return b""


# gRPC's own concurrency limit, as a multiple of the interceptor's plus room: the interceptor's quick refusals are
# calls in flight too while a burst arrives, so only a flood far deeper than the limit is refused uncounted.
BACKSTOP_FACTOR = 4
BACKSTOP_ROOM = 64
# Server threads kept free of expensive calls, for health checks, cheap calls and quick refusals.
RESERVED_WORKERS = 4
# Threads streams (Watch) may not take: unary calls always find these (beside the reserved ones).
UNARY_WORKERS = 16


@dataclass(frozen=True)
class ServerOptions:
    max_workers: int = 16
    # Calls beyond this are refused with RESOURCE_EXHAUSTED instead of queueing without bound.
    max_concurrent_rpcs: int = 64
    # Expensive calls of one pool computing at once. One Python process computes on one core at a time (the GIL):
    # more slots only interleave the same CPU and slow every thread's turn, health checks' included.
    compute_slots: int = 1
    # A server thread idle this long ends (common.threads): threads a burst of streams started are given back.
    thread_idle_s: float = DEFAULT_IDLE_S
    # Whether other processes may bind the same port (common.processes). Off, a second server on a taken port fails
    # to start instead of silently sharing it (gRPC turns SO_REUSEPORT on unless told otherwise).
    reuse_port: bool = False
    token: str = ""  # one bearer token, the fleet's admin (--token-file); `identities` instead for teams
    identities: Identities | None = None  # principals, teams and roles (--auth-file)
    tls_cert_chain: bytes = b""
    tls_private_key: bytes = b""

    def accepted(self) -> Identities | None:
        """Who may call; None: anyone, as the fleet's admin (no authentication)."""
        if self.identities is not None:
            return self.identities
        return Identities.single_admin(self.token) if self.token else None


def build_server(address: str, register: Callable[[grpc.Server], None], service_names: list[str],
                 options: ServerOptions, bounds: Bounds, expensive: Mapping[str, str] | None = None,
                 on_unauthenticated: Callable[[str, str, int], None] = lambda method, credentials, count: None,
                 ) -> tuple[grpc.Server, int, health.HealthServicer]:
    """A ready (not started) server; every request is checked against `bounds` before its handler runs, and the
    `expensive` methods (method name -> pool) go through Admission, which keeps RESERVED_WORKERS threads free."""
    if options.max_workers <= RESERVED_WORKERS:
        raise ValueError(f"max_workers must be more than the {RESERVED_WORKERS} reserved for health checks")
    expensive = expensive or {}
    admission = Admission({pool: options.compute_slots for pool in set(expensive.values())},
                          options.max_workers - RESERVED_WORKERS)
    streams = StreamGate(max(1, options.max_workers - RESERVED_WORKERS - UNARY_WORKERS))
    pool = ElasticThreadPool(options.max_workers, options.thread_idle_s, "rpc")
    interceptors: list[grpc.ServerInterceptor] = [RequestContextInterceptor(
        bounds, admission, expensive, streams, lambda: pool.load, options.max_concurrent_rpcs)]
    identities = options.accepted()
    if identities is not None:
        interceptors.insert(0, BearerTokenInterceptor(identities, on_unauthenticated))
    # gRPC's own limit is a backstop above the interceptor's, whose refusals the metrics count.
    server = grpc.server(pool, interceptors=interceptors,
                         maximum_concurrent_rpcs=options.max_concurrent_rpcs * BACKSTOP_FACTOR + BACKSTOP_ROOM,
                         options=[("grpc.max_receive_message_length", MAX_RECEIVE_MESSAGE_BYTES),
                                  ("grpc.max_send_message_length", MAX_SEND_MESSAGE_BYTES),
                                  ("grpc.so_reuseport", int(options.reuse_port))])
    register(server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in [*service_names, ""]:
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection([*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    return server, _bind(server, address, options), health_servicer


def _bind(server: grpc.Server, address: str, options: ServerOptions) -> int:
    """Listen on `address` (TLS when the options carry a certificate); the port bound."""
    try:
        if options.tls_cert_chain:
            creds = grpc.ssl_server_credentials([(options.tls_private_key, options.tls_cert_chain)])
            port = server.add_secure_port(address, creds)
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as e:  # gRPC's "Failed to bind": the port is taken or the host is not this machine's
        raise OSError(f"could not bind {address}: {e}") from e
    if port == 0:
        raise OSError(f"could not bind {address}")
    return port


# Threads of the separate health server: probes are short and few.
HEALTH_SERVER_WORKERS = 2


def health_server(address: str, health_servicer: health.HealthServicer,
                  options: ServerOptions) -> tuple[grpc.Server, int]:
    """A started server answering only gRPC health (the main server's statuses) on threads of its own, with the
    main server's TLS."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=HEALTH_SERVER_WORKERS), maximum_concurrent_rpcs=16)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = _bind(server, address, options)
    server.start()
    return server, port


def shutdown(server: grpc.Server, health_servicer: health.HealthServicer, grace_s: float,
             drain_delay_s: float = 0.0) -> None:
    """Graceful stop: report NOT_SERVING (still serving for `drain_delay_s`), then refuse new calls and let running
    ones finish within `grace_s`; calls still running then are cancelled (long handlers see caller_gone)."""
    health_servicer.enter_graceful_shutdown()
    if drain_delay_s > 0:
        threading.Event().wait(drain_delay_s)
    server.stop(grace_s).wait()

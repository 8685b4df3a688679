"""gRPC plumbing shared by the planner and executor servers: one error table, request ids,
bearer-token auth, health, reflection and TLS."""

from __future__ import annotations

import hmac
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status

from planner.errors import InvalidFieldError, NotFoundError, PlannerError

log = structlog.get_logger("tunefleet.rpc")
REQUEST_ID_KEY = "x-request-id"


class PreconditionError(PlannerError):
    """The request is valid but the system's state forbids it now (FAILED_PRECONDITION)."""


class ResourceExhaustedError(PlannerError):
    """A limit was hit (RESOURCE_EXHAUSTED)."""


def _status(code: int, message: str, details: list[Any]) -> status_pb2.Status:
    packed = []
    for d in details:
        a = any_pb2.Any()
        a.Pack(d)
        packed.append(a)
    return status_pb2.Status(code=code, message=message, details=packed)


def error_status(exc: Exception) -> tuple[status_pb2.Status | None, grpc.StatusCode, str]:
    """The one table from domain errors to gRPC status codes."""
    if isinstance(exc, InvalidFieldError):
        violation = error_details_pb2.BadRequest.FieldViolation(field=exc.field, description=exc.description)
        return (_status(code_pb2.INVALID_ARGUMENT, str(exc),
                        [error_details_pb2.BadRequest(field_violations=[violation])]),
                grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    if isinstance(exc, NotFoundError):
        return _status(code_pb2.NOT_FOUND, str(exc), []), grpc.StatusCode.NOT_FOUND, str(exc)
    if isinstance(exc, PreconditionError):
        return (_status(code_pb2.FAILED_PRECONDITION, str(exc), []),
                grpc.StatusCode.FAILED_PRECONDITION, str(exc))
    if isinstance(exc, ResourceExhaustedError):
        return (_status(code_pb2.RESOURCE_EXHAUSTED, str(exc), []),
                grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
    return None, grpc.StatusCode.INTERNAL, "internal error; the server log has the details"


def _abort(context: grpc.ServicerContext, exc: Exception) -> None:
    status, code, message = error_status(exc)
    if status is None:
        log.exception("rpc.internal_error")
        context.abort(code, message)
    else:
        log.info("rpc.rejected", code=code.name, error=message)
        context.abort_with_status(rpc_status.to_status(status))


def call_unary(fn: Callable[[Any], Any], request: Any, context: grpc.ServicerContext) -> Any:
    try:
        return fn(request)
    except Exception as exc:  # noqa: BLE001 - every error is mapped or reported as INTERNAL
        _abort(context, exc)


class RequestContextInterceptor(grpc.ServerInterceptor):
    """Binds a request id (from x-request-id or new) to every log line; logs each call's outcome."""

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        handler = continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        method = details.method
        metadata = dict(details.invocation_metadata or ())
        request_id = metadata.get(REQUEST_ID_KEY) or uuid.uuid4().hex
        inner = handler.unary_unary

        def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
            structlog.contextvars.bind_contextvars(request_id=request_id, method=method)
            start = time.perf_counter()
            try:
                context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))
                return inner(request, context)
            finally:
                log.debug("rpc.done", duration_ms=round((time.perf_counter() - start) * 1e3, 3))
                structlog.contextvars.clear_contextvars()

        return grpc.unary_unary_rpc_method_handler(wrapped, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Rejects calls without `authorization: Bearer <token>`; health checks stay open."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        if details.method.startswith("/grpc.health.v1.Health/"):
            return continuation(details)
        given = dict(details.invocation_metadata or ()).get("authorization", "")
        if hmac.compare_digest(given.encode(), self._expected):
            return continuation(details)

        def deny(request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token: send "
                                                           "'authorization: Bearer <token>' metadata")
        return grpc.unary_unary_rpc_method_handler(deny)


@dataclass(frozen=True)
class ServerOptions:
    max_workers: int = 8
    token: str = ""
    tls_cert_chain: bytes = b""
    tls_private_key: bytes = b""


def build_server(address: str, register: Callable[[grpc.Server], None], service_names: list[str],
                 options: ServerOptions) -> tuple[grpc.Server, int, health.HealthServicer]:
    from concurrent import futures

    interceptors: list[grpc.ServerInterceptor] = [RequestContextInterceptor()]
    if options.token:
        interceptors.insert(0, BearerTokenInterceptor(options.token))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=options.max_workers), interceptors=interceptors)
    register(server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in [*service_names, ""]:
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection([*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    if options.tls_cert_chain:
        creds = grpc.ssl_server_credentials([(options.tls_private_key, options.tls_cert_chain)])
        port = server.add_secure_port(address, creds)
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"could not bind {address}")
    return server, port, health_servicer


def shutdown(server: grpc.Server, health_servicer: health.HealthServicer, grace_s: float) -> None:
    """Graceful stop: report NOT_SERVING, refuse new calls, let running ones finish."""
    health_servicer.enter_graceful_shutdown()
    server.stop(grace_s).wait()

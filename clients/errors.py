"""Typed client errors: what callers catch instead of grpc.RpcError."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from common.errors import FieldError, MissingError, PreconditionError


@dataclass
class FieldViolation:
    field: str
    description: str


@dataclass
class TunefleetError(Exception):
    message: str
    code: str = "UNKNOWN"
    violations: list[FieldViolation] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message


class InvalidArgument(TunefleetError):
    """The request has a bad field; `violations` names it."""


class NotFound(TunefleetError):
    pass


class FailedPrecondition(TunefleetError):
    pass


class Unauthenticated(TunefleetError):
    pass


class PermissionDenied(TunefleetError):
    """The caller's role does not allow the call; the message names the role it needs."""


class ResourceExhausted(TunefleetError):
    """A server limit was hit (too many concurrent calls or watchers); retry later."""


class QuotaExceeded(ResourceExhausted):
    """The caller's or its team's own limit (a QuotaFailure): retrying soon does not help; free what it holds."""


class Unavailable(TunefleetError):
    """The server could not be reached or is shutting down."""


class ServerError(TunefleetError):
    pass


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: Unavailable,
}


def from_rpc_error(exc: grpc.RpcError) -> TunefleetError:
    code = exc.code()
    violations: list[FieldViolation] = []
    status = rpc_status.from_call(exc)
    cls = _BY_CODE.get(code, ServerError)
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                violations += [FieldViolation(v.field, v.description) for v in bad.field_violations]
            elif detail.Is(error_details_pb2.QuotaFailure.DESCRIPTOR):
                cls = QuotaExceeded
    return cls(exc.details() or code.name, code.name, violations)


def from_domain_error(exc: Exception) -> TunefleetError:
    """The client error an in-process call raises for a domain error, as the server would map it."""
    if isinstance(exc, FieldError):
        return InvalidArgument(str(exc), "INVALID_ARGUMENT", [FieldViolation(exc.field, exc.description)])
    if isinstance(exc, MissingError):
        return NotFound(str(exc), "NOT_FOUND")
    if isinstance(exc, PreconditionError):
        return FailedPrecondition(str(exc), "FAILED_PRECONDITION")
    return ServerError(str(exc), "INTERNAL")

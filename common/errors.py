"""Error categories shared by the planner and the executor.

Each package keeps its own error base class; its errors also derive from one of these categories, and
`common.rpc` maps categories (not packages) to gRPC status codes.
"""

from __future__ import annotations


class _FieldNamingError(Exception):
    """An error about one request field: `field` names it, `description` says what to change."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.description = message


class FieldError(_FieldNamingError):
    """A request field has a value that cannot be used (INVALID_ARGUMENT); names the field."""


class MissingError(_FieldNamingError):
    """Something the request refers to (a job, a provider) does not exist (NOT_FOUND)."""


class PreconditionError(Exception):
    """The request is valid but the system's state forbids it now (FAILED_PRECONDITION)."""


class UnknownCallerError(Exception):
    """The caller's token is missing or no longer known (UNAUTHENTICATED): says how to give one."""


class DeniedError(Exception):
    """The caller is known but its role does not allow the call (PERMISSION_DENIED); says which role it needs."""


class ExhaustedError(Exception):
    """A limit was hit (RESOURCE_EXHAUSTED)."""


class QuotaError(ExhaustedError):
    """One caller's or team's own limit was hit (RESOURCE_EXHAUSTED with a QuotaFailure naming `subject`): unlike a
    server at capacity, retrying soon does not help; the caller must free what it holds."""

    def __init__(self, subject: str, message: str) -> None:
        super().__init__(message)
        self.subject = subject


class UnavailableError(Exception):
    """A backing service (the fleet's Redis) cannot be reached now; the client may retry (UNAVAILABLE)."""


class AbandonedError(Exception):
    """The caller is gone (cancelled, or its deadline passed): the work stopped unfinished (CANCELLED)."""

"""Errors of fleet state (gRPC status through common.errors' categories)."""

from __future__ import annotations

from common.errors import ExhaustedError, MissingError, PreconditionError, UnavailableError
from contract.errors import ExecutorError


class JobNotFoundError(ExecutorError, MissingError):
    """No job has this id (NOT_FOUND)."""


def no_such_job(job_id: str) -> JobNotFoundError:
    """The one answer for an id nobody used and for another team's job alike (its existence is not revealed)."""
    return JobNotFoundError("job_id", f"no job {job_id!r}; 'tunefleet jobs' lists the fleet's jobs")


class FleetUnavailableError(ExecutorError, UnavailableError):
    """The fleet's Redis cannot be reached (UNAVAILABLE); the call may be retried."""


class QueueFullError(ExecutorError, ExhaustedError):
    """A caller already has as many jobs waiting as one caller may (RESOURCE_EXHAUSTED)."""


class HostNotQuarantinedError(ExecutorError, MissingError):
    """ClearHost of a host that is not quarantined (NOT_FOUND)."""


class OverBudgetError(ExecutorError, PreconditionError):
    """Submit would take a team past its monthly budget (FAILED_PRECONDITION); says by how much."""

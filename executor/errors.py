"""Typed executor errors. Each names what is wrong and what to change."""

from __future__ import annotations

from common.errors import ExhaustedError, FieldError, MissingError, PreconditionError, UnavailableError


class ExecutorError(Exception):
    """Base class of every error the executor raises on purpose."""


class PlanError(ExecutorError, FieldError):
    """A plan (or request) field has a value the executor cannot run (gRPC INVALID_ARGUMENT)."""


class JobNotFoundError(ExecutorError, MissingError):
    """No job has this id (NOT_FOUND)."""


class HostError(ExecutorError, PreconditionError):
    """The plan is valid but this host cannot run it, e.g. QLoRA without a GPU (FAILED_PRECONDITION)."""


class DoesNotFitError(ExecutorError, ExhaustedError):
    """The preflight step ran out of memory (RESOURCE_EXHAUSTED)."""


class TrainingFailedError(ExecutorError):
    """A training rank exited with an error; the message carries its last log lines."""


class FleetUnavailableError(ExecutorError, UnavailableError):
    """The fleet's Redis cannot be reached (UNAVAILABLE); the call may be retried."""

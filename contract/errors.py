"""Typed errors of the plan contract and of running a plan. Each names what is wrong and what to change.

SpecError is the base of every error tunefleet's domain code raises on purpose (the planner's and the
executor's alike); each error also derives from a category of common.errors, which common.rpc maps to a gRPC
status code.
"""

from __future__ import annotations

from common.errors import ExhaustedError, FieldError, PreconditionError


class SpecError(Exception):
    """Base class of every error tunefleet raises on purpose."""


class InvalidFieldError(SpecError, FieldError):
    """A request field has a value the planner cannot use (gRPC INVALID_ARGUMENT)."""


class ExecutorError(SpecError):
    """Base class of every error the executor side raises on purpose."""


class PlanError(ExecutorError, FieldError):
    """A plan (or request) field has a value the executor cannot run (gRPC INVALID_ARGUMENT)."""


class HostError(ExecutorError, PreconditionError):
    """The plan is valid but this host cannot run it, e.g. QLoRA without a GPU (FAILED_PRECONDITION)."""


class DoesNotFitError(ExecutorError, ExhaustedError):
    """The preflight step ran out of memory (RESOURCE_EXHAUSTED)."""


class TrainingFailedError(ExecutorError):
    """A training rank exited with an error; the message carries its last log lines."""


class LeaseLostError(ExecutorError):
    """This run's fencing token is stale: another host owns the job now. Stop, write nothing."""

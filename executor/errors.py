"""Typed executor errors. Each names what is wrong and what to change."""

from __future__ import annotations


class ExecutorError(Exception):
    """Base class of every error the executor raises on purpose."""


class PlanError(ExecutorError):
    """A plan field has a value the executor cannot run (gRPC INVALID_ARGUMENT)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.description = message


class HostError(ExecutorError):
    """The plan is valid but this host cannot run it, e.g. QLoRA without a GPU (FAILED_PRECONDITION)."""


class DoesNotFitError(ExecutorError):
    """The preflight step ran out of memory (RESOURCE_EXHAUSTED)."""


class TrainingFailedError(ExecutorError):
    """A training rank exited with an error; the message carries its last log lines."""

"""Typed planner errors. Each says which field is wrong and what to change."""

from __future__ import annotations


class PlannerError(Exception):
    """Base class of every error the planner raises on purpose."""


class InvalidFieldError(PlannerError):
    """A request field has a value the planner cannot use."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.description = message


class UnknownNameError(InvalidFieldError):
    """A request names a catalog entry (GPU, flavor, model) that does not exist."""


class NotFoundError(PlannerError):
    """A resource the request refers to (a job, a provider) does not exist."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.description = message


class UnsupportedError(InvalidFieldError):
    """The request is well formed but asks for something tunefleet does not run."""

"""Typed planner errors. Each says which field is wrong and what to change."""

from __future__ import annotations

from common.errors import FieldError, MissingError


class PlannerError(Exception):
    """Base class of every error the planner raises on purpose."""


class InvalidFieldError(PlannerError, FieldError):
    """A request field has a value the planner cannot use."""


class UnknownNameError(InvalidFieldError):
    """A request names a catalog entry (GPU, flavor, model) that does not exist."""


class NotFoundError(PlannerError, MissingError):
    """A resource the request refers to (a provider) does not exist."""


class UnsupportedError(InvalidFieldError):
    """The request is well formed but asks for something tunefleet does not run."""

"""Typed planner errors. Each says which field is wrong and what to change."""

from __future__ import annotations

from common.errors import MissingError
from contract.errors import InvalidFieldError, SpecError


class PlannerError(SpecError):
    """Base class of every error the planner raises on purpose."""


class UnknownNameError(InvalidFieldError, PlannerError):
    """A request names a catalog entry (GPU, flavor, model) that does not exist."""


class NotFoundError(PlannerError, MissingError):
    """A resource the request refers to (a provider) does not exist."""


class UnsupportedError(InvalidFieldError, PlannerError):
    """The request is well formed but asks for something tunefleet does not run."""

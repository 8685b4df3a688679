"""Helpers of the contract's frozen values: validation and a hash computed once."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from contract.errors import InvalidFieldError


def positive(field_name: str, value: int | float) -> None:
    if value <= 0:
        raise InvalidFieldError(field_name, f"must be greater than 0, got {value}")


def hash_once(self: Any) -> int:
    """Specs key the planner's caches: a frozen value is hashed once, not field by field at every lookup."""
    cached: int | None = self.__dict__.get("_hash")
    if cached is None:
        cached = hash(tuple(getattr(self, f.name) for f in fields(self)))
        object.__setattr__(self, "_hash", cached)
    return cached


def without_hash(self: Any) -> dict[str, object]:
    """Pickled without the cached hash: string hashes differ between processes."""
    return {k: v for k, v in self.__dict__.items() if k != "_hash"}

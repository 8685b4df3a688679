"""The planner's memo caches, in one registry. A fit is arithmetic over a model's shape: what does not depend on the
GPU (the parameter split, the per-GPU memory on n ranks, the grid's specs) is computed once and reused by every
Fit, suggestion and Recommend that needs it. Every cached function is pure and keyed on frozen values bounded by
contract.limits, never on request bytes; each cache is bounded by its entry count (least recently used out)."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_CACHES: list[Any] = []


def memo(maxsize: int) -> Callable[[F], F]:
    """functools.lru_cache(maxsize), registered so that `clear` and `entries` see it."""
    def wrap(fn: F) -> F:
        cached = lru_cache(maxsize=maxsize)(fn)
        _CACHES.append(cached)
        return cached  # type: ignore[return-value]
    return wrap


def clear() -> None:
    """Empty every cache (tests compare cold answers with warm ones)."""
    for cached in _CACHES:
        cached.cache_clear()


def entries() -> int:
    """Entries held across every cache."""
    return sum(cached.cache_info().currsize for cached in _CACHES)

"""Admission of expensive calls: a bounded number compute at once per pool, a bounded number more wait (holding a
server thread, not the CPU), and the rest are refused at once, so that health checks and cheap calls always find
a thread; and the check long handlers use to stop when their caller is gone."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from common import metrics
from common.errors import AbandonedError, ExhaustedError


def caller_gone(context: grpc.ServicerContext) -> Callable[[], bool]:
    """A check long handlers call between units of work: True once the caller cancelled, its deadline passed, or
    the server stopped (which cancels every call still running after its grace period)."""
    def gone() -> bool:
        remaining = context.time_remaining()
        return not context.is_active() or (remaining is not None and remaining <= 0)
    return gone


# How often a call waiting for a compute slot looks whether its caller is still there.
_ADMISSION_POLL_S = 0.1


class StreamGate:
    """At most `limit` streaming calls at once (each holds a server thread for its whole life); the next is refused
    at once with RESOURCE_EXHAUSTED instead of taking the threads unary calls need."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._open = 0
        self._lock = threading.Lock()

    def enter(self) -> None:
        with self._lock:
            if self._open >= self._limit:
                raise ExhaustedError(f"{self._limit} streams are open on this server, its most; retry with backoff, "
                                     "or reach another replica")
            self._open += 1
        metrics.OPEN_STREAMS.inc()

    def leave(self) -> None:
        with self._lock:
            self._open -= 1
        metrics.OPEN_STREAMS.dec()


class Admission:
    """Bounds the expensive calls. Each pool (e.g. quick Fit/Estimate, long Recommend searches, so that one kind
    cannot starve the other) has its own compute slots; together at most `max_admitted` calls compute or wait
    (waiting no longer than their deadline); any beyond are refused at once with RESOURCE_EXHAUSTED."""

    def __init__(self, slots_by_pool: Mapping[str, int], max_admitted: int) -> None:
        self._slots = {pool: threading.BoundedSemaphore(n) for pool, n in slots_by_pool.items()}
        self._lock = threading.Lock()
        self._admitted = 0
        self._limit = max_admitted

    def run(self, context: grpc.ServicerContext, pool: str, fn: Callable[[], Any]) -> Any:
        slots = self._slots[pool]
        with self._lock:
            if self._admitted >= self._limit:
                raise ExhaustedError(f"the server is at capacity ({self._limit} expensive calls running or "
                                     "waiting); retry with backoff")
            self._admitted += 1
        try:
            gone = caller_gone(context)
            with metrics.EXPENSIVE_CALLS.labels(pool, "waiting").track_inprogress():
                while not slots.acquire(timeout=_ADMISSION_POLL_S):
                    if gone():
                        raise AbandonedError("the caller left before a compute slot was free")
            try:
                with metrics.EXPENSIVE_CALLS.labels(pool, "computing").track_inprogress():
                    return fn()
            finally:
                slots.release()
        finally:
            with self._lock:
                self._admitted -= 1



"""Admission of expensive calls: a bounded number compute at once per pool, a bounded number more wait (holding a
server thread, not the CPU), and the rest are refused at once, so that health checks and cheap calls always find
a thread; and the check long handlers use to stop when their caller is gone."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import grpc

from common import metrics
from common.errors import AbandonedError, ExhaustedError, QuotaError


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


class FifoSlots:
    """`n` slots handed out in arrival order: a release gives its slot to the longest waiter, so a call never waits
    behind calls that arrived after it (a semaphore polled with a timeout sends a waiter to the back of the line
    at every poll: Recommend p99 1.9 s where the queue was 0.3 s deep)."""

    def __init__(self, n: int) -> None:
        self._free = n
        self._waiters: deque[threading.Event] = deque()
        self._lock = threading.Lock()

    def acquire(self, gone: Callable[[], bool]) -> None:
        """Take a slot, waiting in line; AbandonedError once `gone()` says the caller left."""
        with self._lock:
            if self._free and not self._waiters:
                self._free -= 1
                return
            handed = threading.Event()
            self._waiters.append(handed)
        while not handed.wait(_ADMISSION_POLL_S):
            if gone():
                with self._lock:
                    if not handed.is_set():
                        self._waiters.remove(handed)
                        raise AbandonedError("the caller left before a compute slot was free")
                self.release()  # handed a slot as it left: pass it on
                raise AbandonedError("the caller left before a compute slot was free")

    def release(self) -> None:
        with self._lock:
            if self._waiters:
                self._waiters.popleft().set()
            else:
                self._free += 1


class Admission:
    """Bounds the expensive calls. Each pool (e.g. quick Fit/Estimate, long Recommend searches, so that one kind
    cannot starve the other) has its own compute slots; together at most `max_admitted` calls compute or wait
    (waiting no longer than their deadline); any beyond are refused at once with RESOURCE_EXHAUSTED."""

    def __init__(self, slots_by_pool: Mapping[str, int], max_admitted: int) -> None:
        self._slots = {pool: FifoSlots(n) for pool, n in slots_by_pool.items()}
        self._gauges = {pool: (metrics.EXPENSIVE_CALLS.labels(pool, "waiting"),
                               metrics.EXPENSIVE_CALLS.labels(pool, "computing")) for pool in slots_by_pool}
        self._lock = threading.Lock()
        self._admitted = 0
        self._limit = max_admitted

    def run(self, context: grpc.ServicerContext, pool: str, fn: Callable[[], Any]) -> Any:
        slots, (waiting, computing) = self._slots[pool], self._gauges[pool]
        with self._lock:
            if self._admitted >= self._limit:
                raise ExhaustedError(f"the server is at capacity ({self._limit} expensive calls running or "
                                     "waiting); retry with backoff")
            self._admitted += 1
        try:
            with waiting.track_inprogress():
                slots.acquire(caller_gone(context))
            try:
                with computing.track_inprogress():
                    return fn()
            finally:
                slots.release()
        finally:
            with self._lock:
                self._admitted -= 1




class OwnerLimits:
    """At most `per_principal` open streams of one caller and `per_team` of one team, so that one viewer (or one
    team) cannot hold every stream slot of a server; 0 means no limit."""

    def __init__(self, per_principal: int, per_team: int) -> None:
        self._limits = {"principal": per_principal, "team": per_team}
        self._open: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    @contextmanager
    def held(self, principal: str, team: str) -> Iterator[None]:
        keys = (("principal", principal), ("team", team))
        with self._lock:
            for key in keys:
                limit = self._limits[key[0]]
                if limit and self._open.get(key, 0) >= limit:
                    raise QuotaError(f"{key[0]}:{key[1]}",
                                     f"{key[0]} {key[1]} already has {limit} streams open on this server, the most "
                                     f"one {key[0]} may; close one (each Watch, dashboard tab or 'tunefleet watch' "
                                     "holds one) and retry")
            for key in keys:
                self._open[key] = self._open.get(key, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                for key in keys:
                    self._open[key] -= 1
                    if not self._open[key]:
                        del self._open[key]

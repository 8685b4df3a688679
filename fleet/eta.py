"""When will a queued job start? Pure arithmetic over what the fleet knows: each host of the class is free now or
when its running job's remaining time has passed (its progress ETA, else its predicted duration less the time it
has run), and the jobs ahead in the class's queue order (higher tiers first) take the earliest free hosts for their
predicted durations, one host per node of a gang. Three such replays — with every time at its most likely, its
shortest and its longest (the planner's range) — give the expected start and its range.

What it cannot know, and says so: a job ahead whose plan carries no prediction counts as taking no time, and the
start is then a lower bound. Preemption, retries and jobs submitted later at a higher tier can only move a start
later (or, for preemption, earlier for a high-priority job); the replay assumes none."""

from __future__ import annotations

import heapq
from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """Seconds: the most likely figure and its range."""

    mid_s: float
    low_s: float
    high_s: float

    def scaled(self, mid_s: float) -> Span:
        """This span's shape (low and high as fractions of mid) around another mid."""
        if self.mid_s <= 0:
            return Span(mid_s, mid_s, mid_s)
        return Span(mid_s, mid_s * self.low_s / self.mid_s, mid_s * self.high_s / self.mid_s)


NOW = Span(0.0, 0.0, 0.0)


def remaining(predicted: Span | None, elapsed_s: float, progress_eta_s: float) -> Span:
    """How long a running job still holds its host: its own progress ETA when it reported one (with the
    prediction's range around it), else its predicted duration less the time it ran, never below 0."""
    if progress_eta_s > 0:
        return (predicted or Span(progress_eta_s, progress_eta_s, progress_eta_s)).scaled(progress_eta_s)
    if predicted is None:
        return NOW
    return Span(max(0.0, predicted.mid_s - elapsed_s), max(0.0, predicted.low_s - elapsed_s),
                max(0.0, predicted.high_s - elapsed_s))


@dataclass(frozen=True)
class Start:
    in_s: Span  # from now
    lower_bound: bool  # a job ahead had no predicted duration (counted as none)


class Schedule:
    """The replay of one GPU class: hosts' free times, advanced job by job in queue order."""

    def __init__(self, hosts_free_in: list[Span]) -> None:
        self._free = [sorted(getattr(h, k) for h in hosts_free_in) for k in ("mid_s", "low_s", "high_s")]
        self._unknown = False

    @property
    def hosts(self) -> int:
        return len(self._free[0])

    def start(self, nodes: int = 1) -> Start | None:
        """When a job of `nodes` hosts, next in line, would start; None when the class has fewer hosts."""
        if nodes > self.hosts:
            return None
        at = [heapq.nsmallest(nodes, free)[-1] for free in self._free]
        return Start(Span(*at), self._unknown)

    def take(self, duration: Span | None, nodes: int = 1) -> None:
        """The next job in line takes its hosts for `duration` (None: unknown, counted as no time)."""
        if nodes > self.hosts:
            return  # it cannot start on this class; it blocks nothing the replay can tell
        self._unknown = self._unknown or duration is None
        span = duration or NOW
        for free, d in zip(self._free, (span.mid_s, span.low_s, span.high_s), strict=True):
            taken = [heapq.heappop(free) for _ in range(nodes)]
            for _ in range(nodes):
                heapq.heappush(free, taken[-1] + d)  # the gang starts when its last host is free

"""When will a queued job start? Pure arithmetic over what the fleet knows: each host of the class is free now or
when its running job's remaining time has passed (its progress ETA, else its predicted duration less the time it
has run), and the scheduling rules (fleet.fairshare) played forward: each time a host is free the waiter they rank
first takes it for its predicted duration, one host per node of a gang, and a job's end gives its GPUs back to its
team's quota. Three such replays — with every time at its most likely, its shortest and its longest (the planner's
range) — give the expected start and its range.

What it cannot know, and says so: a job ahead whose plan carries no prediction counts as taking no time, and the
start is then a lower bound. Preemption, retries and jobs submitted later at a higher tier can only move a start
later (or, for preemption, earlier for a high-priority job); the replay assumes none."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fleet.fairshare import ClassQuotas, Waiter, rank, team_streams
from fleet.ledger import AS_PREDICTED, HoldModel


@dataclass(frozen=True)
class Span:
    """Seconds: the most likely figure and its range."""

    mid_s: float
    low_s: float
    high_s: float

    def held(self, hold: HoldModel) -> Span:
        """How long a run predicted to take this span holds its host, by the class's hold model."""
        return Span(hold.held_s(self.mid_s), hold.held_s(self.low_s), hold.held_s(self.high_s))

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


@dataclass(frozen=True)
class Holder:
    """A host of the class: when it is free, and the team whose running job holds it and that job's GPUs on it (its
    release gives them back to the team's quota)."""

    free_in: Span
    team: str = ""
    gpus: int = 0


_FLAVOURS = ("mid_s", "low_s", "high_s")  # Span's fields, in the order of Waiter.predicted


def replay(waiters: Sequence[Waiter], hosts: Sequence[Holder], usage_s: Mapping[str, float],
           weights: Mapping[str, float], quotas: ClassQuotas | None,
           hold: HoldModel = AS_PREDICTED) -> dict[str, Start]:
    """When each waiter of a class starts: the scheduling rules (fleet.fairshare.rank: within quota first, then the
    tier, then weighted fair share, FIFO within a team and tier) played forward over the class's hosts. Each time a
    host is free the best-ranked waiter starts — a gang when its last host is free — and holds it for its predicted
    duration; the hosts' running jobs end at their remaining time and give their GPUs back to their team's quota. Three
    replays, every duration at its most likely, shortest and longest (each as the class's hold model makes it: the
    start-up and the ratio this fleet's runs showed), give the start and its range. A waiter that
    cannot start (more hosts than the class has, or beyond its team's limit for good) gets none; a waiter behind one
    without a predicted duration (counted as none) gets a lower bound."""
    runs = [_replay_one(waiters, hosts, usage_s, weights, quotas, flavour, hold) for flavour in _FLAVOURS]
    out = {}
    for job_id, (mid_s, unknown) in runs[0].items():
        low_s, high_s = runs[1].get(job_id, (mid_s, unknown))[0], runs[2].get(job_id, (mid_s, unknown))[0]
        out[job_id] = Start(Span(mid_s, min(low_s, mid_s), max(high_s, mid_s)), unknown)
    return out


def _replay_one(waiters: Sequence[Waiter], hosts: Sequence[Holder], usage_s: Mapping[str, float],
                weights: Mapping[str, float], quotas: ClassQuotas | None, flavour: str,
                hold: HoldModel) -> dict[str, tuple[float, bool]]:
    streams = team_streams(waiters)
    which = _FLAVOURS.index(flavour)  # the place of this replay's figure in Waiter.predicted
    usage = {team: usage_s.get(team, 0.0) for team, _ in streams}
    held = dict(quotas.held_gpus) if quotas else {}
    free = sorted(getattr(h.free_in, flavour) for h in hosts)  # a heap: when each host is free
    releases = sorted((getattr(h.free_in, flavour), h.team, h.gpus) for h in hosts if h.gpus)  # a heap too
    cursor = dict.fromkeys(streams, 0)
    live = set(streams)
    starts: dict[str, tuple[float, bool]] = {}
    now_s, unknown = 0.0, False
    while live and free:
        now_s = max(now_s, free[0])
        while releases and releases[0][0] <= now_s:
            _, team, gpus = heapq.heappop(releases)
            held[team] = held.get(team, 0) - gpus
        ranked = {st: k for st in live if (k := rank(streams[st][cursor[st]], held, usage, weights, quotas))}
        if not ranked:  # every team with waiters is at its limit: on to the next release, if any
            if not releases:
                break
            now_s = releases[0][0]
            continue
        stream = min(ranked, key=lambda st: ranked[st])  # type: ignore[arg-type,return-value]
        _, w = streams[stream][cursor[stream]]
        cursor[stream] += 1
        if cursor[stream] == len(streams[stream]):
            live.discard(stream)
        if w.nodes > len(free):
            continue  # it cannot start on this class; it blocks nothing the replay can tell
        taken = [heapq.heappop(free) for _ in range(w.nodes)]
        start_s = max(now_s, taken[-1])  # the gang starts when its last host is free
        starts[w.job_id] = (start_s, unknown)
        duration_s = hold.held_s(w.predicted[which]) if w.predicted else 0.0
        unknown = unknown or w.predicted is None
        for _ in range(w.nodes):
            heapq.heappush(free, start_s + duration_s)
        heapq.heappush(releases, (start_s + duration_s, w.team, w.gpus))
        held[w.team] = held.get(w.team, 0) + w.gpus
        usage[w.team] = usage.get(w.team, 0.0) + w.gpu_seconds
    return starts

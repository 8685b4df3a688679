"""When will a queued job start? Pure arithmetic over what the fleet knows: each host of the class is free now or
when its running job's remaining time has passed (its progress ETA, else its predicted duration less the time it
has run), and the scheduling rules played forward: each time a host is free the waiter the start order
(fleet.ordering.rank) puts first takes it for its predicted duration, one host per node of a gang, and a job's end
gives its GPUs back to its team's quota. When every host is busy, the waiter that the fleet's sweep (fleet.recovery)
would let a running job yield to — preemption for a higher tier, reclaim for a team within its quota — takes the
victim's host once it has checkpointed, and the victim waits again at the front of its queue for what it had left.
Three such replays — with every time at its most likely, its shortest and its longest (the planner's range, and the
yield's) — give the expected start and its range.

What it cannot know, and says so: a job ahead whose plan carries no prediction counts as taking no time, and the
start is then a lower bound. Retries and jobs submitted later can only move a start later (later submissions at a
higher tier, by preemption, too); the replay assumes none. A running gang is never a victim in the replay, and a
waiting gang never preempts: it waits for its hosts to end."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fleet.ledger import AS_PREDICTED, HoldModel
from fleet.ordering import PREEMPTION, RECLAIM, ClassQuotas, Running, Waiter, rank, team_streams, victim


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
class Yielding:
    """How the fleet's sweep (fleet.recovery) makes running jobs give way, as the replay plays it: `preemption` (the
    fleet's policy) lets a waiter of a higher tier take the host of a lower tier's job; `reclaim` (the fleet does it
    on every class with quotas) lets a waiter within its team's quota take a borrower's; neither takes a job that has
    run less than `min_runtime_s`. The victim's host is free `takes` after the ask (the sweep's interval, then its
    step and checkpoint, at most the policy's deadline)."""

    preemption: bool = False
    reclaim: bool = False
    min_runtime_s: float = 0.0
    takes: Span = NOW


NEVER = Yielding()


@dataclass(frozen=True)
class Holder:
    """A host of the class: when it is free, and the team whose running job holds it and that job's GPUs on it (its
    release gives them back to the team's quota). A running job the sweep may ask to yield names itself: its id, its
    tier (fleet.queues.TIERS' place, 0: high) and how long it has run; `yielding` when it was asked already (it frees
    the host within Yielding.takes and waits again for the rest)."""

    free_in: Span
    team: str = ""
    gpus: int = 0
    job_id: str = ""  # "" for an idle host or a job the replay never asks to yield (a gang's)
    tier: int = 0
    ran_s: float = 0.0
    yielding: bool = False


_FLAVOURS = ("mid_s", "low_s", "high_s")  # Span's fields, in the order of Waiter.predicted


def replay(waiters: Sequence[Waiter], hosts: Sequence[Holder], usage_s: Mapping[str, float],
           weights: Mapping[str, float], quotas: ClassQuotas | None,
           hold: HoldModel = AS_PREDICTED, yielding: Yielding = NEVER) -> dict[str, Start]:
    """When each waiter of a class starts: the scheduling rules (fleet.ordering.rank: within quota first, then the
    tier, then weighted fair share, FIFO within a team and tier) played forward over the class's hosts. Each time a
    host is free the best-ranked waiter starts — a gang when its last host is free — and holds it for its predicted
    duration; the hosts' running jobs end at their remaining time and give their GPUs back to their team's quota.
    While every host is busy, a waiter the sweep would serve by preemption or reclaim (`yielding`) starts on its
    victim's host once that has yielded, and the victim waits again at the front of its queue. Three replays, every
    duration at its most likely, shortest and longest (each as the class's hold model makes it: the start-up and the
    ratio this fleet's runs showed), give the start and its range. A waiter that cannot start (more hosts than the
    class has, or beyond its team's limit for good) gets none; a waiter behind one without a predicted duration
    (counted as none) gets a lower bound."""
    runs = [_Replay(waiters, hosts, usage_s, weights, quotas, flavour, hold, yielding).run() for flavour in _FLAVOURS]
    out = {}
    for job_id, (mid_s, unknown) in runs[0].items():
        low_s, high_s = runs[1].get(job_id, (mid_s, unknown))[0], runs[2].get(job_id, (mid_s, unknown))[0]
        out[job_id] = Start(Span(mid_s, min(low_s, mid_s), max(high_s, mid_s)), unknown)
    return out


@dataclass
class _Slot:
    """A host in the replay: when it is free, and the job on it until then — its team's GPUs it holds there (0 once
    given back, or on a gang's other hosts) and, when the sweep may ask it to yield, what it would queue again as."""

    free_s: float
    team: str = ""
    gpus: int = 0
    victim: _Queued | None = None
    since_s: float = 0.0  # when its job started (before the replay: negative)


@dataclass(frozen=True)
class _Queued:
    """A waiter in the replay; `held_s` for a yielded job's rest (its host time, start-up included), else its
    predicted duration through the hold model."""

    waiter: Waiter
    index: int  # its place in FIFO order (a yielded job: ahead of every other)
    held_s: float | None = None


@dataclass
class _Replay:
    waiters: Sequence[Waiter]
    hosts: Sequence[Holder]
    usage_s: Mapping[str, float]
    weights: Mapping[str, float]
    quotas: ClassQuotas | None
    flavour: str
    hold: HoldModel
    yielding: Yielding
    starts: dict[str, tuple[float, bool]] = field(default_factory=dict)

    def run(self) -> dict[str, tuple[float, bool]]:
        which = _FLAVOURS.index(self.flavour)  # the place of this replay's figure in Waiter.predicted
        takes_s = getattr(self.yielding.takes, self.flavour)
        self.streams = {st: [_Queued(w, i) for i, w in queued]
                        for st, queued in team_streams(self.waiters).items()}
        self.held = dict(self.quotas.held_gpus) if self.quotas else {}
        usage = {team: self.usage_s.get(team, 0.0) for team, _ in self.streams}
        self.cursor = dict.fromkeys(self.streams, 0)
        self.live = set(self.streams)
        self.slots = [self._slot(h, takes_s) for h in self.hosts]
        now_s, unknown = 0.0, False
        while self.live and self.slots:
            self._release(now_s)
            ranked = {st: k for st in self.live
                      if (k := rank(self._ranked(st), self.held, usage, self.weights, self.quotas))}
            if not ranked:  # every team with waiters is at its limit: on to the next release, if any
                later = [s.free_s for s in self.slots if s.gpus and s.free_s > now_s]
                if not later:
                    break
                now_s = min(later)
                continue
            order = sorted(ranked, key=lambda st: ranked[st])  # type: ignore[arg-type,return-value]
            if all(s.free_s > now_s for s in self.slots):
                served = next(((st, v) for st in order if (v := self._victim(self._head(st).waiter, now_s))), None)
                if served is None:  # no one gives way: on to the next host free
                    now_s = min(s.free_s for s in self.slots)
                    continue
                stream = served[0]
                self._ask(*served[1], now_s, takes_s)
            else:
                stream = order[0]
            q = self._take(stream)
            w = q.waiter
            if w.nodes > len(self.slots):
                continue  # it cannot start on this class; it blocks nothing the replay can tell
            taken = sorted(self.slots, key=lambda s: s.free_s)[:w.nodes]
            start_s = max(now_s, taken[-1].free_s)  # the gang starts when its last host is free
            self.starts.setdefault(w.job_id, (start_s, unknown))
            if q.held_s is not None:
                duration_s = q.held_s
            else:
                duration_s = self.hold.held_s(w.predicted[which]) if w.predicted else 0.0
                unknown = unknown or w.predicted is None
            for n, slot in enumerate(taken):
                slot.free_s, slot.team, slot.since_s = start_s + duration_s, w.team, start_s
                slot.gpus = w.gpus if n == 0 else 0
                slot.victim = (_Queued(w, -1) if w.nodes == 1 else None)
            self.held[w.team] = self.held.get(w.team, 0) + w.gpus
            usage[w.team] = usage.get(w.team, 0.0) + (w.gpu_seconds if q.held_s is None else 0.0)
        waiting = {w.job_id for w in self.waiters}  # not the running jobs the replay made yield
        return {job_id: v for job_id, v in self.starts.items() if job_id in waiting}

    def _slot(self, h: Holder, takes_s: float) -> _Slot:
        free_s = getattr(h.free_in, self.flavour)
        slot = _Slot(free_s, h.team, h.gpus, since_s=-h.ran_s)
        if h.job_id:
            waiter = Waiter(h.job_id, h.team, 0.0, h.gpus, h.tier)
            if h.yielding:  # asked already: it frees its host soon and waits again for the rest
                slot.free_s = min(free_s, takes_s)
                self._requeue(_Queued(waiter, -1, max(0.0, free_s - slot.free_s) + self.hold.start_s))
            else:
                slot.victim = _Queued(waiter, -1)
        return slot

    def _head(self, stream: tuple[str, int]) -> _Queued:
        return self.streams[stream][self.cursor[stream]]

    def _ranked(self, stream: tuple[str, int]) -> tuple[int, Waiter]:
        q = self._head(stream)
        return q.index, q.waiter

    def _take(self, stream: tuple[str, int]) -> _Queued:
        q = self._head(stream)
        self.cursor[stream] += 1
        if self.cursor[stream] == len(self.streams[stream]):
            self.live.discard(stream)
        return q

    def _requeue(self, q: _Queued) -> None:
        """A yielded job waits again at the front of its queue (fleet.recovery.requeue_held)."""
        stream = (q.waiter.team, q.waiter.tier)
        at = self.cursor.setdefault(stream, 0)
        self.streams.setdefault(stream, []).insert(at, q)
        self.live.add(stream)

    def _release(self, now_s: float) -> None:
        for slot in self.slots:
            if slot.gpus and slot.free_s <= now_s:
                self.held[slot.team] = self.held.get(slot.team, 0) - slot.gpus
                slot.gpus = 0

    def _victim(self, w: Waiter, now_s: float) -> tuple[_Slot, _Queued] | None:
        """The host whose job the sweep would ask to yield to `w` (fleet.recovery: fleet.ordering.victim for
        preemption, then for reclaim), and that job, if any. The replay knows no job's work since its checkpoint: among
        equals the latest started yields (fleet.ordering's V4)."""
        if w.nodes != 1:
            return None
        on = {Running(q.waiter.job_id, s.team, q.waiter.tier, s.since_s, s.gpus): (s, q)
              for s in self.slots if (q := s.victim) is not None and s.free_s > now_s}
        for kind, allowed in ((PREEMPTION, self.yielding.preemption), (RECLAIM, self.yielding.reclaim)):
            chosen = victim(kind, w, list(on), self.held, self.quotas, now_s - self.yielding.min_runtime_s) \
                if allowed else None
            if chosen is not None:
                return on[chosen]
        return None

    def _ask(self, slot: _Slot, victim: _Queued, now_s: float, takes_s: float) -> None:
        """The victim yields: its GPUs go back now (as the sweep counts them), its host is free `takes_s` later (the
        next start waits for it), and it waits again for the rest of its run and a new start-up."""
        freed_s = min(slot.free_s, now_s + takes_s)
        self._requeue(_Queued(victim.waiter, -1, max(0.0, slot.free_s - freed_s) + self.hold.start_s))
        self.held[slot.team] = self.held.get(slot.team, 0) - slot.gpus
        slot.gpus, slot.free_s, slot.victim = 0, freed_s, None

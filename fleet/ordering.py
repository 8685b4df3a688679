"""The fleet's scheduling policy, pure: who starts next on a GPU class and who yields a host, over typed snapshots
(read from Redis by fleet.fairshare and fleet.recovery; replayed into the future by fleet.eta). No I/O here.

Start order (start_line): again and again, the next waiter of the (team, tier) stream ranked lowest by these criteria,
in this order (`rank`):
  S1. within its team's quota before one that would borrow (a quota is a guarantee, whatever the tier: Kueue's
      nominal quota);
  S2. the higher tier;
  S3. the team with the least usage per unit of weight (usage: decaying GPU-seconds, each start adding its own);
  S4. the oldest (its index in FIFO order: unique, so the order is deterministic).
A team whose next waiter of a tier would pass its quota plus its borrowing limit starts nothing more of that tier:
its jobs there are held back (a team's jobs keep their FIFO order within a tier).

Victim order (`victim`): the running job the sweep asks to checkpoint and yield its host to a waiter, by these
criteria, in this order:
  V1. eligible: never one younger than the policy's minimum runtime, nor one already yielding; for preemption a job
      of a lower tier than the waiter's, and on a class with quotas only the waiter's own team's or a borrower's; for
      reclaim (a waiter within its team's quota, on a class with quotas) another team's job that borrows;
  V2. for preemption, the lowest tier first (reclaim skips it: a borrower yields what it borrowed whatever the
      tier, so the least loss decides);
  V3. the least work lost: the GPU-seconds it ran since its last checkpoint, which it runs again;
  V4. the latest started;
  V5. its job id (deterministic).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# How fast usage is forgotten: Slurm's default PriorityDecayHalfLife (slurm.conf(5): "PriorityDecayHalfLife ...
# default is 7-0", seven days).
USAGE_HALF_LIFE_S = 7 * 24 * 3600.0
DEFAULT_WEIGHT = 1.0


def decayed(gpu_s: float, at_s: float, now_s: float, half_life_s: float = USAGE_HALF_LIFE_S) -> float:
    return gpu_s * math.pow(2.0, -max(0.0, now_s - at_s) / half_life_s)


@dataclass(frozen=True)
class Waiter:
    job_id: str
    team: str
    gpu_seconds: float  # its predicted duration × its GPUs: what its start adds to its team's usage
    gpus: int = 1  # GPUs it holds while it runs (all its nodes')
    tier: int = 0  # its queue's place among the class's tiers (0: high)
    nodes: int = 1  # hosts it takes (a gang's nodes)
    predicted: tuple[float, float, float] | None = None  # its duration: most likely, shortest, longest (s)


@dataclass(frozen=True)
class TeamShare:
    """A team's terms on the fleet (the identities file's [[team]] weight, quota_gpus, borrow_gpus)."""

    weight: float = DEFAULT_WEIGHT
    quota_gpus: Mapping[str, int] = field(default_factory=dict)  # GPU class -> GPUs it is guaranteed
    borrow_gpus: Mapping[str, int] = field(default_factory=dict)  # GPU class -> most beyond its quota (absent: any)

    def limit_gpus(self, gpu_class: str) -> float:
        return self.quota_gpus.get(gpu_class, 0) + self.borrow_gpus.get(gpu_class, math.inf)


@dataclass(frozen=True)
class ClassQuotas:
    """A GPU class with quotas: what each team's running jobs hold on it, and its terms there."""

    gpu_class: str
    held_gpus: Mapping[str, int]
    shares: Mapping[str, TeamShare]

    def quota(self, team: str) -> int:
        return self.shares.get(team, TeamShare()).quota_gpus.get(self.gpu_class, 0)

    def limit(self, team: str) -> float:
        return self.shares.get(team, TeamShare()).limit_gpus(self.gpu_class)


def managed(gpu_class: str, shares: Mapping[str, TeamShare]) -> bool:
    """Quotas apply to a class once any team has one there; elsewhere teams share by weight alone."""
    return any(gpu_class in s.quota_gpus for s in shares.values())


@dataclass(frozen=True)
class Line:
    """A start order (a class's, or a queue's part of it), and the jobs held back by their team's limit (oldest
    first)."""

    order: list[str]
    held_back: list[str]


def start_line(waiters: list[Waiter], usage_s: Mapping[str, float], weights: Mapping[str, float],
               quotas: ClassQuotas | None = None, enough: int = 0) -> Line:
    """The order in which the waiters of a class start. Again and again, the oldest waiter of the team and tier that
    come first: a job within its team's quota before one that would borrow (a quota is a guarantee, whatever the
    tier: Kueue's nominal quota), then the higher tier, then the team with the least usage per unit of weight, then
    the oldest. Each start adds its GPU-seconds to its team's usage and its GPUs to what the team holds. A team whose
    next job of a tier would pass its quota plus its borrowing limit starts nothing more of that tier (a team's jobs
    keep their FIFO order within a tier): they are held back. With `enough`, the line stops once each tier has that
    many jobs in it or none left to place (a worker's arrangement needs only the fronts; held_back is then partial)."""
    streams = team_streams(waiters)
    teams = {team for team, _ in streams}
    usage = {team: usage_s.get(team, 0.0) for team in teams}
    held = {team: (quotas.held_gpus.get(team, 0) if quotas else 0) for team in teams}
    cursor = dict.fromkeys(streams, 0)
    held_back: list[tuple[int, str]] = []
    order: list[str] = []
    live = set(streams)
    placed = dict.fromkeys((tier for _, tier in streams), 0)
    while live and not (enough and all(n >= enough or all(t != tier for _, t in live) for tier, n in placed.items())):
        # few streams (teams × tiers): a scan per start, as each start changes its team's standing in every tier
        ranked = {st: rank(streams[st][cursor[st]], held, usage, weights, quotas) for st in live}
        for stream in [st for st, k in ranked.items() if k is None]:
            held_back.extend((i, w.job_id) for i, w in streams[stream][cursor[stream]:])
            live.discard(stream)
        if not live:
            break
        stream = min(live, key=lambda st: ranked[st])  # type: ignore[arg-type,return-value]
        _, w = streams[stream][cursor[stream]]
        order.append(w.job_id)
        placed[w.tier] += 1
        usage[w.team] += w.gpu_seconds
        held[w.team] += w.gpus
        cursor[stream] += 1
        if cursor[stream] == len(streams[stream]):
            live.discard(stream)
    return Line(order, [job_id for _, job_id in sorted(held_back)])


def team_streams(waiters: Sequence[Waiter]) -> dict[tuple[str, int], list[tuple[int, Waiter]]]:
    """The waiters by (team, tier), each stream in FIFO order with the waiter's index among all of them: what the start
    order (start_line) and the expected-start replay (fleet.eta) take from."""
    streams: dict[tuple[str, int], list[tuple[int, Waiter]]] = {}
    for index, w in enumerate(waiters):
        streams.setdefault((w.team, w.tier), []).append((index, w))
    return streams


def rank(head: tuple[int, Waiter], held: Mapping[str, int], usage: Mapping[str, float],
         weights: Mapping[str, float], quotas: ClassQuotas | None) -> tuple[int, int, float, int] | None:
    """Where a team's next waiter of a tier (with its index in FIFO order) stands among the others', lowest first, given
    the GPUs each team holds and its usage; None when it would pass its team's quota plus borrowing limit."""
    index, w = head
    if quotas is not None and held.get(w.team, 0) + w.gpus > quotas.limit(w.team):
        return None
    borrowing = int(quotas is not None and held.get(w.team, 0) + w.gpus > quotas.quota(w.team))
    return borrowing, w.tier, usage.get(w.team, 0.0) / weights.get(w.team, DEFAULT_WEIGHT), index


def fair_order(waiters: list[Waiter], usage_s: Mapping[str, float], weights: Mapping[str, float]) -> list[str]:
    """start_line without quotas: teams by weight and usage alone."""
    return start_line(waiters, usage_s, weights).order


@dataclass(frozen=True)
class Standing:
    team: str
    gpu_class: str
    held_gpus: int
    quota_gpus: int
    limit_gpus: int | None  # None: no borrowing limit
    weight: float
    usage_gpu_s: float


@dataclass(frozen=True)
class Snapshot:
    """What a start order depends on, read once: the teams' terms, their usage, and the GPUs each team's running
    jobs hold on each class."""

    shares: dict[str, TeamShare]
    usage_s: dict[str, float]
    held_gpus: dict[str, dict[str, int]]  # GPU class -> team -> GPUs

    def weights(self) -> dict[str, float]:
        return {team: share.weight for team, share in self.shares.items()}

    def quotas(self, gpu_class: str) -> ClassQuotas | None:
        if not managed(gpu_class, self.shares):
            return None
        return ClassQuotas(gpu_class, self.held_gpus.get(gpu_class, {}), self.shares)


PREEMPTION, RECLAIM = "preemption", "reclaim"  # why a running job yields: a higher tier, or its team borrows


@dataclass(frozen=True)
class Running:
    """A running job as the victim order sees it."""

    job_id: str
    team: str
    tier: int  # its queue's place among the class's tiers (0: high)
    started_s: float
    gpus: int = 1
    lost_gpu_s: float = 0.0  # what yielding now loses: GPU-seconds since its last checkpoint (0: not known)
    yields_to_tier: int | None = None  # asked to yield already, to a waiter of this tier

    @property
    def yielding(self) -> bool:
        return self.yields_to_tier is not None


def victim(kind: str, waiter: Waiter, running: Sequence[Running], held: Mapping[str, int],
           quotas: ClassQuotas | None, min_start_s: float) -> Running | None:
    """The job to ask to yield to `waiter` (module docstring: V1-V5) for `kind` (PREEMPTION or RECLAIM), given the GPUs
    each team holds on the class now; None when no job may. `min_start_s`: a job started after it is too young."""
    def borrows(team: str) -> bool:
        return quotas is not None and held.get(team, 0) > quotas.quota(team)

    eligible = [r for r in running if not r.yielding and r.started_s <= min_start_s]
    if kind == PREEMPTION:
        eligible = [r for r in eligible if r.tier > waiter.tier and (quotas is None or r.team == waiter.team
                                                                     or borrows(r.team))]
    elif quotas is None or held.get(waiter.team, 0) + waiter.gpus > quotas.quota(waiter.team):
        return None  # reclaim serves a waiter within its team's quota only
    else:
        eligible = [r for r in eligible if r.team != waiter.team and borrows(r.team)]
    by_tier = kind == PREEMPTION
    return min(eligible, key=lambda r: (-r.tier if by_tier else 0, r.lost_gpu_s, -r.started_s, r.job_id), default=None)

"""Weighted fair sharing of a GPU class between teams. Within a tier, the next job is not the oldest one but the
oldest job of the team whose recent usage per unit of weight is lowest: usage is its GPU-seconds, decaying with a
half-life (charged holds, plus what its running jobs have held so far), and its weight comes from the identities
file ([[team]] weight, default 1). Each job the order takes adds its predicted GPU-seconds to its team, so teams
interleave in proportion to their weights; within a team the order stays FIFO, and one team's fleet is FIFO.

rq stays the queue: before each dequeue the worker moves its class's fair-share head to the front of the highest
non-empty tier (fleet.queues.JobQueues.move_to_front: only if no other worker changed the queue meanwhile), and the
executor service shows positions and expected starts in the same order."""

from __future__ import annotations

import heapq
import json
import math
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from fleet.jobs import now_ms
from fleet.keys import RUNNING_SET, TEAM_SHARES, USAGE, job_key
from fleet.queues import JobQueues, parse_queue_name

# How fast usage is forgotten: Slurm's default PriorityDecayHalfLife (slurm.conf(5): "PriorityDecayHalfLife ...
# default is 7-0", seven days).
USAGE_HALF_LIFE_S = 7 * 24 * 3600.0
DEFAULT_WEIGHT = 1.0
# What taking a job without a predicted duration adds to its team while ordering: one GPU-hour.
UNPREDICTED_JOB_GPU_S = 3600.0
# The queued jobs a fair order considers, oldest first (the rest wait their turn in FIFO order behind them).
ORDER_WINDOW = 500
# The start order's jobs each arrangement puts in front: enough for the workers of a class dequeuing at once.
ARRANGED = 16
# The record fields an order reads of a queued job.
ORDER_FIELDS = ("team", "predicted_s", "gpus", "nodes")

# Decay a team's usage to now and add a charge, in one step: usage_now = usage_then × 2^(-(now - then) / half-life)
# + added (exponential decay with a half-life). Fields "<team>:gpu_s" and "<team>:at_s".
_ADD_USAGE = """
local now = tonumber(ARGV[3])
local v = tonumber(redis.call('HGET', KEYS[1], ARGV[1] .. ':gpu_s') or '0')
local at = tonumber(redis.call('HGET', KEYS[1], ARGV[1] .. ':at_s') or ARGV[3])
if now < at then now = at end
v = v * math.pow(2, -(now - at) / tonumber(ARGV[4])) + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1] .. ':gpu_s', tostring(v), ARGV[1] .. ':at_s', tostring(now))
"""


def charge_usage(pipe: Any, team: str, gpu_s: float, now_s: float | None = None) -> None:
    """Charge a hold's GPU-seconds to its team's decaying usage, inside the caller's pipeline (fleet.ledger's
    transaction, when a hold ends)."""
    pipe.register_script(_ADD_USAGE)(keys=[USAGE], args=[team, gpu_s, time.time() if now_s is None else now_s,
                                                         USAGE_HALF_LIFE_S], client=pipe)


def decayed(gpu_s: float, at_s: float, now_s: float, half_life_s: float = USAGE_HALF_LIFE_S) -> float:
    return gpu_s * math.pow(2.0, -max(0.0, now_s - at_s) / half_life_s)


@dataclass(frozen=True)
class Waiter:
    job_id: str
    team: str
    gpu_seconds: float  # its predicted duration × its GPUs: what its start adds to its team's usage
    gpus: int = 1  # GPUs it holds while it runs (all its nodes')


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
    """A queue's start order, and the jobs held back by their team's limit (oldest first)."""

    order: list[str]
    held_back: list[str]


def start_line(waiters: list[Waiter], usage_s: Mapping[str, float], weights: Mapping[str, float],
               quotas: ClassQuotas | None = None) -> Line:
    """The order in which the waiters start. Again and again, the oldest waiter of the team that comes first: a team
    whose next job fits within its quota before one that would borrow, then the least usage per unit of weight, then
    the team whose oldest waiter came first. Each start adds its GPU-seconds to its team's usage and its GPUs to what
    the team holds. A team whose next job would pass its quota plus its borrowing limit starts nothing more (a team's
    jobs keep their FIFO order): its remaining waiters are held back."""
    by_team: dict[str, list[tuple[int, Waiter]]] = {}
    for index, w in enumerate(waiters):
        by_team.setdefault(w.team, []).append((index, w))
    usage = {team: usage_s.get(team, 0.0) for team in by_team}
    held = {team: (quotas.held_gpus.get(team, 0) if quotas else 0) for team in by_team}
    cursor = dict.fromkeys(by_team, 0)
    held_back: list[tuple[int, str]] = []

    def push(heap: list[tuple[int, float, int, str]], team: str) -> None:
        index, w = by_team[team][cursor[team]]
        if quotas is not None and held[team] + w.gpus > quotas.limit(team):
            held_back.extend((i, x.job_id) for i, x in by_team[team][cursor[team]:])
            return
        borrowing = int(quotas is not None and held[team] + w.gpus > quotas.quota(team))
        heapq.heappush(heap, (borrowing, usage[team] / weights.get(team, DEFAULT_WEIGHT), index, team))

    heap: list[tuple[int, float, int, str]] = []
    for team in by_team:
        push(heap, team)
    order: list[str] = []
    while heap:
        team = heapq.heappop(heap)[3]
        _, w = by_team[team][cursor[team]]
        order.append(w.job_id)
        usage[team] += w.gpu_seconds
        held[team] += w.gpus
        cursor[team] += 1
        if cursor[team] < len(by_team[team]):
            push(heap, team)
    return Line(order, [job_id for _, job_id in sorted(held_back)])


def fair_order(waiters: list[Waiter], usage_s: Mapping[str, float], weights: Mapping[str, float]) -> list[str]:
    """start_line without quotas: teams by weight and usage alone."""
    return start_line(waiters, usage_s, weights).order


def _gpu_class(queue: str) -> str:
    parsed = parse_queue_name(queue)
    return parsed[0] if parsed else ""


def _waiter(job_id: str, record: Mapping[bytes, bytes]) -> Waiter:
    gpus = max(1, int(record.get(b"gpus") or 1)) * max(1, int(record.get(b"nodes") or 1))
    predicted_s = float(record.get(b"predicted_s") or 0)
    return Waiter(job_id, record.get(b"team", b"").decode(),
                  predicted_s * gpus if predicted_s > 0 else UNPREDICTED_JOB_GPU_S * gpus, gpus)


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

    def quotas(self, gpu_class: str) -> ClassQuotas | None:
        if not managed(gpu_class, self.shares):
            return None
        return ClassQuotas(gpu_class, self.held_gpus.get(gpu_class, {}), self.shares)


class FairShare:
    """The teams' terms and usage in Redis, and the start order of a queue."""

    def __init__(self, connection: redis.Redis, job_queues: JobQueues | None = None) -> None:
        self.redis: Any = connection  # redis-py's stubs type replies as unions of every RESP type
        self.queues = job_queues or JobQueues(connection)

    # --- the teams' terms (written by the executor service from its identities file) ----------------------------

    def save_shares(self, shares: Mapping[str, TeamShare]) -> None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(TEAM_SHARES)
        if shares:
            pipe.hset(TEAM_SHARES, mapping={team: json.dumps(
                {"weight": s.weight, "quota_gpus": dict(s.quota_gpus), "borrow_gpus": dict(s.borrow_gpus)})
                for team, s in shares.items()})
        pipe.execute()

    def shares(self) -> dict[str, TeamShare]:
        found = {}
        for team, value in self.redis.hgetall(TEAM_SHARES).items():
            terms = json.loads(value)
            found[team.decode()] = TeamShare(float(terms.get("weight", DEFAULT_WEIGHT)), terms.get("quota_gpus", {}),
                                             terms.get("borrow_gpus", {}))
        return found

    def weights(self) -> dict[str, float]:
        return {team: share.weight for team, share in self.shares().items()}

    # --- usage ---------------------------------------------------------------------------------------------------

    def snapshot(self, now_s: float | None = None) -> Snapshot:
        """The teams' terms; each team's decayed GPU-seconds, its running holds' GPU-seconds so far included; and
        the GPUs its running jobs hold on each class."""
        now_s = time.time() if now_s is None else now_s
        stored: dict[str, dict[str, float]] = {}
        for name, value in self.redis.hgetall(USAGE).items():
            team, _, what = name.decode().rpartition(":")
            stored.setdefault(team, {})[what] = float(value)
        usage = {team: decayed(v.get("gpu_s", 0.0), v.get("at_s", now_s), now_s) for team, v in stored.items()}
        held: dict[str, dict[str, int]] = {}
        running = sorted(m.decode() for m in self.redis.smembers(RUNNING_SET))
        pipe = self.redis.pipeline(transaction=False)
        for job_id in running:
            pipe.hmget(job_key(job_id), ["team", "started_at_ms", "gpus", "nodes", "gpu_class"])
        for team_b, started_ms, gpus_b, nodes, gpu_class in pipe.execute() if running else []:
            team = (team_b or b"").decode()
            gpus = max(1, int(gpus_b or 1)) * max(1, int(nodes or 1))
            by_team = held.setdefault((gpu_class or b"").decode(), {})
            by_team[team] = by_team.get(team, 0) + gpus
            if started_ms:
                usage[team] = usage.get(team, 0.0) + max(0.0, now_s - int(started_ms) / 1000) * gpus
        return Snapshot(self.shares(), usage, held)

    def usage(self, now_s: float | None = None) -> dict[str, float]:
        return self.snapshot(now_s).usage_s

    def standings(self, snapshot: Snapshot | None = None) -> list[Standing]:
        """Each team on each class it holds GPUs of or has a quota on, by team then class."""
        snapshot = snapshot or self.snapshot()
        pairs = {(team, c) for c, by_team in snapshot.held_gpus.items() for team in by_team}
        pairs |= {(team, c) for team, share in snapshot.shares.items() for c in share.quota_gpus}
        found = []
        for team, gpu_class in sorted(pairs):
            share = snapshot.shares.get(team, TeamShare())
            limit = share.limit_gpus(gpu_class)
            found.append(Standing(team, gpu_class, snapshot.held_gpus.get(gpu_class, {}).get(team, 0),
                                  share.quota_gpus.get(gpu_class, 0), None if math.isinf(limit) else int(limit),
                                  share.weight, snapshot.usage_s.get(team, 0.0)))
        return found

    # --- order ---------------------------------------------------------------------------------------------------

    def waiters(self, queue: str) -> tuple[list[str], list[str], list[Waiter]]:
        """The queue's first ORDER_WINDOW ids (FIFO), the member tickets among them, and the jobs as waiters."""
        ids = self.queues.queued_ids(queue, ORDER_WINDOW)
        if not ids:
            return [], [], []
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(job_key(job_id), list(ORDER_FIELDS))
        tickets: list[str] = []
        waiters: list[Waiter] = []
        for job_id, values in zip(ids, pipe.execute(), strict=True):
            if values[0] is None and values[1] is None:
                tickets.append(job_id)
            else:
                waiters.append(_waiter(job_id, dict(zip((f.encode() for f in ORDER_FIELDS), values, strict=True))))
        return ids, tickets, waiters

    def line(self, queue: str, snapshot: Snapshot | None = None) -> Line:
        """The queue's first ORDER_WINDOW ids in start order, and those held back by their team's limit. An id
        without a job record (a gang's member ticket, pushed to the front for its gang) keeps its place first."""
        ids, tickets, waiters = self.waiters(queue)
        if not ids:
            return Line([], [])
        snapshot = snapshot or self.snapshot()
        quotas = snapshot.quotas(_gpu_class(queue))
        if quotas is None and len({w.team for w in waiters}) < 2:
            return Line(ids, [])  # one team and no quotas: FIFO
        line = start_line(waiters, snapshot.usage_s, {t: s.weight for t, s in snapshot.shares.items()}, quotas)
        return Line(tickets + line.order, line.held_back)

    def order(self, queue: str, snapshot: Snapshot | None = None) -> list[str]:
        """Every id of the window in the order it is expected to start (held-back jobs last)."""
        line = self.line(queue, snapshot)
        return line.order + line.held_back

    def arrange(self, queue: str, snapshot: Snapshot | None = None) -> bool:
        """Put the queue's first ARRANGED jobs in start order at its front, for the dequeues that follow (this
        worker's and others' at the same moment); False when the queue has no job that may start now (each is held
        back by its team's limit)."""
        line = self.line(queue, snapshot)
        if not line.order:
            return not line.held_back
        head = line.order[:ARRANGED]
        if self.queues.queued_ids(queue, len(head)) != head:
            self.queues.move_to_front(head, queue)
        return True


class OrderCache:
    """Start orders of queues, each read once per request (a Fleet or Get reads several jobs' places)."""

    def __init__(self, fair: FairShare) -> None:
        self._fair = fair
        self._lines: OrderedDict[str, Line] = OrderedDict()
        self._snapshot: Snapshot | None = None
        self.at_ms = now_ms()

    def snapshot(self) -> Snapshot:
        if self._snapshot is None:
            self._snapshot = self._fair.snapshot(self.at_ms / 1000)
        return self._snapshot

    def line(self, queue: str) -> Line:
        if queue not in self._lines:
            self._lines[queue] = self._fair.line(queue, self.snapshot())
        return self._lines[queue]

    def order(self, queue: str) -> list[str]:
        line = self.line(queue)
        return line.order + line.held_back

    def index(self, queue: str, job_id: str) -> int | None:
        order = self.order(queue)
        if job_id in order:
            return order.index(job_id)
        return self._fair.queues.position(job_id, queue)  # past the window: FIFO behind it

    def held_back(self, queue: str, job_id: str) -> bool:
        return job_id in self.line(queue).held_back

    def limit_reason(self, queue: str, job_id: str, team: str) -> str:
        """Why the job waits for its team's limit on its class, or "" when it does not."""
        if job_id not in self.line(queue).held_back or self._snapshot is None:
            return ""
        gpu_class = _gpu_class(queue)
        share = self._snapshot.shares.get(team, TeamShare())
        held = self._snapshot.held_gpus.get(gpu_class, {}).get(team, 0)
        quota, limit = share.quota_gpus.get(gpu_class, 0), share.limit_gpus(gpu_class)
        return (f"over quota: team {team} holds {held} {gpu_class} GPU(s), its quota {quota} plus what it may "
                f"borrow ({limit - quota:g}); it starts when the team's running jobs free enough")

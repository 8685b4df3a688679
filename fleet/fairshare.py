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
from dataclasses import dataclass
from typing import Any

import redis

from fleet.jobs import now_ms
from fleet.keys import RUNNING_SET, TEAM_SHARES, USAGE, job_key
from fleet.queues import JobQueues

# How fast usage is forgotten: Slurm's default PriorityDecayHalfLife (slurm.conf(5): "PriorityDecayHalfLife ...
# default is 7-0", seven days).
USAGE_HALF_LIFE_S = 7 * 24 * 3600.0
DEFAULT_WEIGHT = 1.0
# What taking a job without a predicted duration adds to its team while ordering: one GPU-hour.
UNPREDICTED_JOB_GPU_S = 3600.0
# The queued jobs a fair order considers, oldest first (the rest wait their turn in FIFO order behind them).
ORDER_WINDOW = 500
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


def fair_order(waiters: list[Waiter], usage_s: Mapping[str, float], weights: Mapping[str, float]) -> list[str]:
    """The order in which the waiters start: again and again, the oldest waiter of the team with the least usage per
    unit of weight (ties: the team whose oldest waiter came first), which then adds its GPU-seconds to its team."""
    by_team: dict[str, list[tuple[int, Waiter]]] = {}
    for index, w in enumerate(waiters):
        by_team.setdefault(w.team, []).append((index, w))
    usage = {team: usage_s.get(team, 0.0) for team in by_team}
    heap = [(usage[team] / weights.get(team, DEFAULT_WEIGHT), queue[0][0], team) for team, queue in by_team.items()]
    heapq.heapify(heap)
    cursor = dict.fromkeys(by_team, 0)
    order: list[str] = []
    while heap:
        _, _, team = heapq.heappop(heap)
        _, w = by_team[team][cursor[team]]
        order.append(w.job_id)
        usage[team] += w.gpu_seconds
        cursor[team] += 1
        if cursor[team] < len(by_team[team]):
            heapq.heappush(heap, (usage[team] / weights.get(team, DEFAULT_WEIGHT), by_team[team][cursor[team]][0],
                                  team))
    return order


def _waiter(job_id: str, record: Mapping[bytes, bytes]) -> Waiter:
    gpus = max(1, int(record.get(b"gpus") or 1)) * max(1, int(record.get(b"nodes") or 1))
    predicted_s = float(record.get(b"predicted_s") or 0)
    return Waiter(job_id, record.get(b"team", b"").decode(),
                  predicted_s * gpus if predicted_s > 0 else UNPREDICTED_JOB_GPU_S * gpus)


class FairShare:
    """The teams' weights and usage in Redis, and the fair order of a queue."""

    def __init__(self, connection: redis.Redis, job_queues: JobQueues | None = None) -> None:
        self.redis: Any = connection  # redis-py's stubs type replies as unions of every RESP type
        self.queues = job_queues or JobQueues(connection)

    # --- the teams' weights (written by the executor service from its identities file) ------------------------

    def save_weights(self, weights: Mapping[str, float]) -> None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(TEAM_SHARES)
        if weights:
            pipe.hset(TEAM_SHARES, mapping={team: json.dumps({"weight": w}) for team, w in weights.items()})
        pipe.execute()

    def weights(self) -> dict[str, float]:
        return {team.decode(): float(json.loads(value).get("weight", DEFAULT_WEIGHT))
                for team, value in self.redis.hgetall(TEAM_SHARES).items()}

    # --- usage ---------------------------------------------------------------------------------------------------

    def usage(self, now_s: float | None = None) -> dict[str, float]:
        """Each team's decayed GPU-seconds, its running holds' GPU-seconds so far included."""
        now_s = time.time() if now_s is None else now_s
        stored: dict[str, dict[str, float]] = {}
        for field, value in self.redis.hgetall(USAGE).items():
            team, _, what = field.decode().rpartition(":")
            stored.setdefault(team, {})[what] = float(value)
        usage = {team: decayed(v.get("gpu_s", 0.0), v.get("at_s", now_s), now_s) for team, v in stored.items()}
        running = sorted(m.decode() for m in self.redis.smembers(RUNNING_SET))
        pipe = self.redis.pipeline(transaction=False)
        for job_id in running:
            pipe.hmget(job_key(job_id), ["team", "started_at_ms", "gpus", "nodes"])
        for team, started_ms, gpus, nodes in pipe.execute() if running else []:
            if started_ms:
                held_s = max(0.0, now_s - int(started_ms) / 1000) * max(1, int(gpus or 1)) * max(1, int(nodes or 1))
                key = (team or b"").decode()
                usage[key] = usage.get(key, 0.0) + held_s
        return usage

    # --- order ---------------------------------------------------------------------------------------------------

    def order(self, queue: str, usage: Mapping[str, float] | None = None,
              weights: Mapping[str, float] | None = None) -> list[str]:
        """The queue's first ORDER_WINDOW ids in fair-share order. An id without a job record (a gang's member
        ticket, pushed to the front for its gang) keeps its place ahead of the jobs."""
        ids = self.queues.queued_ids(queue, ORDER_WINDOW)
        if len(ids) < 2:
            return ids
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
        if len({w.team for w in waiters}) < 2:
            return ids  # one team: FIFO
        ordered = fair_order(waiters, self.usage() if usage is None else usage,
                             self.weights() if weights is None else weights)
        return tickets + ordered

    def arrange(self, queue: str) -> str | None:
        """Put the queue's fair-share head at its front, for the dequeue that follows; the job moved, if one was."""
        order = self.order(queue)
        if len(order) < 2:
            return None
        head = order[0]
        if self.queues.queued_ids(queue, 1) == [head]:
            return None  # already next
        return head if self.queues.move_to_front(head, queue) else None


class OrderCache:
    """Fair orders of queues, each read once per request (a Fleet or Get reads several jobs' places)."""

    def __init__(self, fair: FairShare) -> None:
        self._fair = fair
        self._orders: OrderedDict[str, list[str]] = OrderedDict()
        self._usage: dict[str, float] | None = None
        self._weights: dict[str, float] | None = None
        self.at_ms = now_ms()

    def order(self, queue: str) -> list[str]:
        if queue not in self._orders:
            if self._usage is None:
                self._usage, self._weights = self._fair.usage(self.at_ms / 1000), self._fair.weights()
            self._orders[queue] = self._fair.order(queue, self._usage, self._weights)
        return self._orders[queue]

    def index(self, queue: str, job_id: str) -> int | None:
        order = self.order(queue)
        if job_id in order:
            return order.index(job_id)
        return self._fair.queues.position(job_id, queue)  # past the window: FIFO behind it

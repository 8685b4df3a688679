"""Weighted fair sharing of a GPU class between teams, read from Redis: the teams' terms and usage, the queued jobs
as waiters, and the start order fleet.ordering computes over them. Within a tier, the next job is not the oldest one
but the oldest job of the team whose recent usage per unit of weight is lowest: usage is its GPU-seconds, decaying
with a half-life (charged holds, plus what its running jobs have held so far), and its weight comes from the
identities file ([[team]] weight, default 1). Each job the order takes adds its predicted GPU-seconds to its team, so
teams interleave in proportion to their weights; within a team the order stays FIFO, and one team's fleet is FIFO.

rq stays the queue: before each dequeue the worker moves its class's fair-share head to the front of the highest
non-empty tier (fleet.queues.JobQueues.move_to_front: only if no other worker changed the queue meanwhile), and the
executor service shows positions and expected starts in the same order."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis

from fleet import queues
from fleet.jobs import JobStore
from fleet.keys import RUNNING_SET, TEAM_SHARES, USAGE
from fleet.ordering import (
    DEFAULT_WEIGHT,
    USAGE_HALF_LIFE_S,
    Line,
    Snapshot,
    Standing,
    TeamShare,
    Waiter,
    decayed,
    start_line,
)
from fleet.queues import JobQueues, QueueRef
from fleet.record import JobRecord, field_names

# What taking a job without a predicted duration adds to its team while ordering: one GPU-hour.
UNPREDICTED_JOB_GPU_S = 3600.0
# The queued jobs a fair order considers, oldest first (the rest wait their turn in FIFO order behind them).
ORDER_WINDOW = 500
# The start order's jobs each arrangement puts in front: enough for the workers of a class dequeuing at once.
ARRANGED = 16
# The record fields an order reads of a queued job (a member ticket has no record: none of them), and of a running
# one (what its team holds on its class, and has used so far).
ORDER_FIELDS = field_names("team", "predicted_s", "gpus", "nodes", "predicted_low_s", "predicted_high_s")
_HELD_FIELDS = field_names("team", "started_at_ms", "gpus", "nodes", "gpu_class")

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


def queue_class(queue: str) -> str:
    """The GPU class of one of the fleet's queue names ("" for another queue)."""
    ref = QueueRef.parse(queue)
    return ref.gpu_class if ref else ""


def _waiter(record: JobRecord, tier: int) -> Waiter:
    gpus, mid_s = record.total_gpus, record.predicted_s
    return Waiter(record.job_id, record.team, mid_s * gpus if mid_s > 0 else UNPREDICTED_JOB_GPU_S * gpus, gpus, tier,
                  max(1, record.nodes), record.predicted if mid_s > 0 else None)


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
        for record in JobStore(self.redis).read(running, _HELD_FIELDS):
            if record is None:
                continue
            by_team = held.setdefault(record.gpu_class, {})
            by_team[record.team] = by_team.get(record.team, 0) + record.total_gpus
            if record.started_at_ms:
                usage[record.team] = usage.get(record.team, 0.0) + \
                    max(0.0, now_s - record.started_at_ms / 1000) * record.total_gpus
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

    def waiters(self, queue: str, tier: int = 0) -> tuple[list[str], list[str], list[Waiter]]:
        """The queue's first ORDER_WINDOW ids (FIFO), the member tickets among them, and the jobs as waiters."""
        ids = self.queues.queued_ids(queue, ORDER_WINDOW)
        if not ids:
            return [], [], []
        tickets: list[str] = []
        waiters: list[Waiter] = []
        for job_id, record in zip(ids, JobStore(self.redis).read(ids, ORDER_FIELDS), strict=True):
            if record is None:
                tickets.append(job_id)
            else:
                waiters.append(_waiter(record, tier))
        return ids, tickets, waiters

    def class_line(self, gpu_class: str, snapshot: Snapshot | None = None, enough: int = 0) -> ClassLine:
        """The start order of a class's queued jobs, every tier's (the first ORDER_WINDOW of each queue), and those
        held back by their team's limit. Ids without a job record (a gang's member tickets, pushed to the front for
        their gang) come first."""
        queue_of: dict[str, str] = {}
        fifo: list[str] = []
        tickets: list[str] = []
        waiters: list[Waiter] = []
        for tier, queue in enumerate([q.name for q in queues.QueueRef.of_class(gpu_class)]):
            ids, queue_tickets, queue_waiters = self.waiters(queue, tier)
            queue_of.update(dict.fromkeys(ids, queue))
            fifo += ids
            tickets += queue_tickets
            waiters += queue_waiters
        if not fifo:
            return ClassLine([], [], {}, [])
        snapshot = snapshot or self.snapshot()
        quotas = snapshot.quotas(gpu_class)
        if quotas is None and len({w.team for w in waiters}) < 2:
            return ClassLine(fifo, [], queue_of, waiters)  # one team and no quotas: FIFO, tier by tier
        line = start_line(waiters, snapshot.usage_s, snapshot.weights(), quotas, enough)
        return ClassLine(tickets + line.order, line.held_back, queue_of, waiters)

    def line(self, queue: str, snapshot: Snapshot | None = None) -> Line:
        """A queue's part of its class's line."""
        return self.class_line(queue_class(queue), snapshot).of(queue)

    def order(self, queue: str, snapshot: Snapshot | None = None) -> list[str]:
        """Every id of the queue's window in the order it is expected to start (held-back jobs last)."""
        line = self.line(queue, snapshot)
        return line.order + line.held_back

    def arrange(self, gpu_class: str, snapshot: Snapshot | None = None) -> list[str] | None:
        """Before a dequeue: put the first ARRANGED jobs of each of the class's queues in start order at its front
        (for the dequeues that follow, this worker's and others' at the same moment), and say which queues to take
        from, in the order of their fronts in the class's line: None for all of them (nothing waits), [] for none
        (every waiting job is held back by its team's limit)."""
        line = self.class_line(gpu_class, snapshot, enough=ARRANGED)
        if not line.queue_of:
            return None
        takeable: list[str] = []
        for job_id in line.order:
            if line.queue_of[job_id] not in takeable:
                takeable.append(line.queue_of[job_id])
        for queue in takeable:
            head = line.of(queue).order[:ARRANGED]
            if self.queues.queued_ids(queue, len(head)) != head:
                self.queues.move_to_front(head, queue)
        return takeable


@dataclass(frozen=True)
class ClassLine:
    """A class's start order over its tiers' queues, the jobs held back, and each id's queue."""

    order: list[str]
    held_back: list[str]
    queue_of: dict[str, str]
    waiters: list[Waiter]  # the jobs (not a gang's member tickets), in FIFO order tier by tier

    def of(self, queue: str) -> Line:
        return Line([j for j in self.order if self.queue_of[j] == queue],
                    [j for j in self.held_back if self.queue_of[j] == queue])

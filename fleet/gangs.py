"""Gangs: the workers that run one multi-node job together, all of them or none.

The worker that claims a job with hardware.nodes = N > 1 (its lease, fleet.leases) leads the gang as node 0:
it forms the gang record, picks the rendezvous endpoint on its own host, and puts N-1 member tickets at the
front of the job's queue. Idle workers of the class take the tickets and join as nodes 1..N-1; once all have
joined the leader starts the gang and every node launches torchrun against the endpoint (contract.rendezvous).

Redis keys (the table: fleet.keys):

    tunefleet:v1:gang:<job_id>            hash    fence, nodes, leader, endpoint, run_id, state (forming,
                                                  running, stopping), marker, reason; per node k: node:<k> its
                                                  host, gpus:<k> its GPU count, ended:<k> how its run ended,
                                                  drain:<k> why it asks to stop. Expires unless the leader keeps
                                                  it (a lost leader ends the gang)
    tunefleet:v1:gang:<job_id>:node:<k>   string  "<host_id>:<fence>" while member k lives; expires unless renewed

Every write names the gang's fence (the leader's claim): a ticket of an earlier attempt finds another fence and
is dropped, and a member whose gang moved on stops.

Fairness. Tickets go to the front of the job's own tier, so the next host of the class that frees up joins the
gang before it takes any single-node job of that tier or a lower one (a big job is not starved by a stream of
small ones); higher tiers still go first. A gang that has not formed within the worker's --gang-timeout-s gives
every joined host back and waits out a backoff (the fleet's retry backoff, doubling per attempt, jittered so
that two gangs holding each other's hosts do not retry in lockstep) before it is queued again at the front, so
a host is held idle for a gang at most that timeout per attempt and the small jobs run in between (the big job
does not starve the others). A gang is not formed at all while the class has fewer live hosts than it needs;
it waits its backoff with that reason, holding nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import redis

from fleet.keys import gang_key, member_key

FORMING, RUNNING, STOPPING = "forming", "running", "stopping"
# Node 0 found the run hung: every node asks its ranks for their stacks (into the shared output), then STOPPING.
DUMPING = "dumping"
# How long a gang may take to form before its hosts are given back (worker --gang-timeout-s).
DEFAULT_GANG_TIMEOUT_S = 120.0
# How long a member that stopped renewing (lost host, killed worker) counts as alive; the other nodes stop their
# ranks within this (plus one supervision poll) of its last renewal.
MEMBER_TTL_S = 15.0
MEMBER_RENEW_INTERVAL_S = 2.0
# Node 0 writes the gang's marker into the job's output; a member that cannot read it there is not on the same
# storage, so it refuses (checkpoints and the resume must be readable by every node).
GANG_MARKER = ".gang"


def ticket_id(job_id: str, fence: int, node_rank: int) -> str:
    """The rq job id of member ticket `node_rank` of the gang formed under `fence`."""
    return f"{job_id}--gang-{fence}-node-{node_rank}"


_TICKET = re.compile(r"^(?P<job_id>.+)--gang-\d+-node-\d+$")


def queued_job_id(entry: str) -> str:
    """The job a queue entry stands for: itself, or the job of a member ticket."""
    ticket = _TICKET.match(entry)
    return ticket.group("job_id") if ticket else entry


@dataclass(frozen=True)
class NodeEnd:
    exit_code: int
    message: str  # why a member refused the run before launching it ("" when its launcher ran)


@dataclass(frozen=True)
class GangView:
    """One reading of a gang record."""

    fence: int
    nodes: int
    leader: str
    endpoint: str
    run_id: str
    state: str
    marker: str
    reason: str
    members: dict[int, str] = field(default_factory=dict)  # node rank -> host id, leader (0) included
    gpus: dict[int, int] = field(default_factory=dict)
    ended: dict[int, NodeEnd] = field(default_factory=dict)
    draining: dict[int, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return len(self.members) == self.nodes


def _view(record: dict[bytes, bytes]) -> GangView | None:
    if not record:
        return None
    text = {k.decode(): v.decode() for k, v in record.items()}
    members, gpus, ended, draining = {}, {}, {}, {}
    for name, value in text.items():
        kind, _, rank = name.partition(":")
        if not rank.isdigit():
            continue
        if kind == "node":
            members[int(rank)] = value
        elif kind == "gpus":
            gpus[int(rank)] = int(value)
        elif kind == "ended":
            end = json.loads(value)
            ended[int(rank)] = NodeEnd(int(end["exit_code"]), str(end["message"]))
        elif kind == "drain":
            draining[int(rank)] = value
    return GangView(fence=int(text["fence"]), nodes=int(text["nodes"]), leader=text["leader"],
                    endpoint=text["endpoint"], run_id=text["run_id"], state=text["state"], marker=text["marker"],
                    reason=text.get("reason", ""), members=members, gpus=gpus, ended=ended, draining=draining)


# KEYS: gang, member. ARGV: fence, node rank, host id, gpu count, member token, member ttl ms.
# 1 joined; 0 the ticket is stale (another attempt, the gang no longer forming, or the rank already taken).
_JOIN = """
if redis.call('HGET', KEYS[1], 'fence') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'state') ~= 'forming' then
  return 0
end
if redis.call('HSETNX', KEYS[1], 'node:' .. ARGV[2], ARGV[3]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'gpus:' .. ARGV[2], ARGV[4])
redis.call('SET', KEYS[2], ARGV[5], 'PX', ARGV[6])
return 1
"""

# KEYS: member. ARGV: token, ttl ms. 1 renewed; 0 the member key is gone or another attempt's.
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

# KEYS: gang. ARGV: fence, field, value. Sets one field of the gang of this fence; 0 when the gang moved on.
_SET = """
if redis.call('HGET', KEYS[1], 'fence') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
return 1
"""


class Gang:
    """The gang of one attempt (the leader's fence) at a multi-node job."""

    def __init__(self, connection: redis.Redis, job_id: str, fence: int, ttl_s: float = MEMBER_TTL_S) -> None:
        self.redis: Any = connection  # redis-py's stubs type replies as unions of every RESP type
        self.job_id, self.fence, self.ttl_ms = job_id, fence, int(ttl_s * 1000)
        self._join = connection.register_script(_JOIN)
        self._renew = connection.register_script(_RENEW)
        self._set = connection.register_script(_SET)

    def _token(self, host_id: str) -> str:
        return f"{host_id}:{self.fence}"

    # --- the leader ---

    def form(self, nodes: int, leader: str, endpoint: str, marker: str) -> None:
        """A new gang record in state forming (replacing an earlier attempt's), the leader as node 0."""
        key = gang_key(self.job_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(key)
        pipe.hset(key, mapping={"fence": self.fence, "nodes": nodes, "leader": leader, "endpoint": endpoint,
                                "run_id": f"{self.job_id}-{self.fence}", "state": FORMING, "marker": marker,
                                "node:0": leader})
        pipe.pexpire(key, self.ttl_ms)
        pipe.execute()

    def keep(self) -> bool:
        """The leader is alive: the record lives another ttl. False when it is gone or another attempt's."""
        key = gang_key(self.job_id)
        if int(self.redis.hget(key, "fence") or 0) != self.fence:
            return False
        return bool(self.redis.pexpire(key, self.ttl_ms))

    def set_state(self, state: str, reason: str = "") -> bool:
        ok = bool(self._set(keys=[gang_key(self.job_id)], args=[self.fence, "state", state]))
        if ok and reason:
            self._set(keys=[gang_key(self.job_id)], args=[self.fence, "reason", reason])
        return ok

    def lost(self, view: GangView) -> list[int]:
        """Members (node ranks >= 1) whose key expired: their host stopped renewing."""
        ranks = sorted(k for k in view.members if k > 0)
        pipe = self.redis.pipeline(transaction=False)
        for k in ranks:
            pipe.get(member_key(self.job_id, k))
        return [k for k, token in zip(ranks, pipe.execute(), strict=True)
                if token is None or token.decode() != self._token(view.members[k])]

    def drop(self) -> None:
        """The attempt is over: the record and every member key go (a member still running sees it and stops)."""
        view = self.view()
        if view is None:
            return
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(gang_key(self.job_id))
        for k in range(1, view.nodes):
            pipe.delete(member_key(self.job_id, k))
        pipe.execute()

    # --- a member ---

    def join(self, node_rank: int, host_id: str, gpu_count: int) -> bool:
        return bool(self._join(keys=[gang_key(self.job_id), member_key(self.job_id, node_rank)],
                               args=[self.fence, node_rank, host_id, gpu_count, self._token(host_id), self.ttl_ms]))

    def renew(self, node_rank: int, host_id: str) -> bool:
        return bool(self._renew(keys=[member_key(self.job_id, node_rank)], args=[self._token(host_id), self.ttl_ms]))

    def report_end(self, node_rank: int, exit_code: int, message: str = "") -> None:
        self._set(keys=[gang_key(self.job_id)],
                  args=[self.fence, f"ended:{node_rank}", json.dumps({"exit_code": exit_code, "message": message})])

    def ask_to_stop(self, node_rank: int, why: str) -> None:
        """A member's host is draining: the leader checkpoints the job and requeues it."""
        self._set(keys=[gang_key(self.job_id)], args=[self.fence, f"drain:{node_rank}", why])

    # --- anyone ---

    def view(self) -> GangView | None:
        """The gang of this fence (None once it is gone or another attempt's)."""
        view = _view(self.redis.hgetall(gang_key(self.job_id)))
        return view if view is not None and view.fence == self.fence else None

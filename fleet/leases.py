"""Job leases and fencing tokens: a job runs on at most one host at a time, and a host that lost its job
cannot write into it.

Claiming a job (QUEUED -> LOADING) increments the record's `fence` and sets the lease key
`tunefleet:v1:lease:<job_id>` = "<host_id>:<fence>", which expires LEASE_TTL_S after its last renewal; the
worker renews it every RENEW_INTERVAL_S while the job runs. A sweeper (fleet.recovery) that finds a running
job without a lease requeues it and increments the fence again. From then on the old holder is refused
everywhere it writes:
- events: the publish script (fleet.events) compares the publisher's fence with the record's;
- checkpoints: rank 0 confirms its fence (FenceGuard) just before it seals a checkpoint;
- the job record: the worker's own requeue and release compare fences inside their transactions, and every other
  field it writes (its output dir, an error, an OOM re-plan) goes through fleet.jobs.JobStore's holder writes,
  which checks the fence and writes in one Lua step.
A holder that cannot reach Redis stops its run by itself once self_fence_after_s(ttl) have passed without a
renewal, before its lease can expire and the job move (the classic lease + self-fencing scheme).

Limit: a holder paused between its fence check and the checkpoint rename (microseconds) can still seal one
checkpoint after the job moved; it then lands beside the new holder's and the newest complete one wins.
"""

from __future__ import annotations

from typing import Any

import redis

from contract.errors import LeaseLostError
from fleet import durability
from fleet.keys import RUNNING_SET, job_key, lease_key

# A lease outlives its last renewal by LEASE_TTL_S; a worker renews every RENEW_INTERVAL_S. A lost host is
# found LEASE_TTL_S after its last renewal plus at most one sweep interval (fleet.recovery).
LEASE_TTL_S = 30.0
RENEW_INTERVAL_S = 5.0
# A holder that could not renew for this long stops its run: its lease cannot have expired yet.
SELF_FENCE_MARGIN_S = 5.0


def self_fence_after_s(ttl_s: float) -> float:
    """How long a holder may go without a renewal before it must stop its run."""
    return max(ttl_s - SELF_FENCE_MARGIN_S, ttl_s / 2)


# KEYS: job, lease, running set. ARGV: host id, now ms, QUEUED, LOADING, lease ttl ms, job id.
# Returns the new fence (a number), or a string: the job's phase name number, or 'missing'.
_CLAIM = """
local phase = redis.call('HGET', KEYS[1], 'phase')
if not phase then return 'missing' end
if tonumber(phase) ~= tonumber(ARGV[3]) then return phase end
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('HSET', KEYS[1], 'phase', ARGV[4], 'host_id', ARGV[1], 'started_at_ms', ARGV[2], 'cancel_requested', 0,
           'preempt_requested', 0, 'preempted_for', '', 'preempt_deadline_ms', 0, 'retry_at_ms', 0, 'budget_stop', '',
           'hold_from_step', redis.call('HGET', KEYS[1], 'checkpoint_step') or 0)
redis.call('SET', KEYS[2], ARGV[1] .. ':' .. fence, 'PX', ARGV[5])
redis.call('SADD', KEYS[3], ARGV[6])
return fence
"""

# KEYS: lease. ARGV: token, ttl ms. 1 renewed, 0 the lease is not ours (expired, or another host's).
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

# KEYS: job, lease, running set. ARGV: token, fence, job id. Ends a holder's lease when its run is over;
# 1 released, 0 the job had moved on (nothing changed).
_RELEASE = """
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
if redis.call('HGET', KEYS[1], 'fence') ~= ARGV[2] then return 0 end
redis.call('SREM', KEYS[3], ARGV[3])
return 1
"""


def token(host_id: str, fence: int) -> str:
    return f"{host_id}:{fence}"


class Leases:
    def __init__(self, connection: redis.Redis, ttl_s: float = LEASE_TTL_S) -> None:
        self.redis: Any = connection  # redis-py's stubs type replies as unions of every RESP type
        self.ttl_s = ttl_s
        self._claim = connection.register_script(_CLAIM)
        self._renew = connection.register_script(_RENEW)
        self._release = connection.register_script(_RELEASE)

    def claim(self, job_id: str, host_id: str, now_ms: int, queued: int, loading: int) -> int | str:
        """The job's new fence when this host now holds it; otherwise why not (the phase number, or 'missing').
        The claim is confirmed on a replica before it is returned (fleet.durability): a fence that a failover could
        erase would let the promoted replica grant the same fence to another host. NotReplicatedError (its `replies`
        hold the claim's answer) when it was not: the caller must not start the run."""
        result = durability.pipelined(self.redis, "claim", lambda pipe: self._claim(
            keys=[job_key(job_id), lease_key(job_id), RUNNING_SET],
            args=[host_id, now_ms, queued, loading, int(self.ttl_s * 1000), job_id], client=pipe))[0]
        return result if isinstance(result, int) else result.decode()

    def renew(self, job_id: str, host_id: str, fence: int) -> bool:
        return bool(self._renew(keys=[lease_key(job_id)], args=[token(host_id, fence), int(self.ttl_s * 1000)]))

    def release(self, job_id: str, host_id: str, fence: int) -> bool:
        return bool(self._release(keys=[job_key(job_id), lease_key(job_id), RUNNING_SET],
                                  args=[token(host_id, fence), fence, job_id]))


class FenceGuard:
    """A run's check that it still owns its job, for writes outside Redis (checkpoint seals)."""

    def __init__(self, connection: redis.Redis, job_id: str, fence: int) -> None:
        self.redis: Any = connection
        self.job_id = job_id
        self.fence = fence

    def confirm(self) -> None:
        """Raises LeaseLostError when the job's fence moved past ours; redis.RedisError when Redis cannot say."""
        current = int(self.redis.hget(job_key(self.job_id), "fence") or 0)
        if current != self.fence:
            raise LeaseLostError(f"job {self.job_id} moved on (fence {current}, this run holds {self.fence}); "
                                 "another host runs it now, so this run stops and writes nothing")

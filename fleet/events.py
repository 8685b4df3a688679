"""Progress events over Redis Streams: one stream per job, entry id = the event's sequence.

Because the entry id is "<sequence>-0", Redis itself refuses an event that is not newer than the last one:
order and exactly-once are structural, and a publisher that retries cannot duplicate an event. The job's
holder publishes what its run wrote to progress.jsonl (executor.worker.publisher); the service publishes the
events of its own transitions (Submit, Cancel, recovery) inside their transactions. The publish script also
updates the job record (phase, last event) in the same atomic step, and trims the stream to the job's
events_max_len (oldest first; the newest — hence a terminal event — is always kept, and the job record keeps
the last event even after the stream expires).
"""

from __future__ import annotations

from typing import Any

import redis
import structlog
from tunefleet.v1 import progress_pb2

from contract.errors import LeaseLostError
from contract.progress import TERMINAL_PHASES
from fleet import durability
from fleet.jobs import DEFAULT_EVENTS_MAX_LEN, EVENTS_RETENTION_S, now_ms
from fleet.keys import FINISHED, events_key, job_key

log = structlog.get_logger("fleet.events")
EVENT_FIELD = b"e"
PUBLISH_PAGE = 100  # events sent in one pipeline (and confirmed by one WAIT) by publish_in_order

# KEYS: job hash, stream, the finished jobs' index (fleet.retention). ARGV: sequence, event bytes, phase, terminal
# (0/1), now ms, retention s, Feedback bytes (stored with the event that carries it, so a client that sees DONE also
# sees the job's Feedback), fence (the publisher's fencing token; 0 for the service's own events, which it writes
# inside transactions), the step of a sealed checkpoint ('' for any other event: fleet.ledger keeps what a hold ran up
# to it), the job id.
# Returns 1 published, 0 already there (not newer than the last event), -1 no such job, -2 stale fence.
_PUBLISH = f"""
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if ARGV[8] ~= '0' and redis.call('HGET', KEYS[1], 'fence') ~= ARGV[8] then return -2 end
local last = tonumber(redis.call('HGET', KEYS[1], 'last_sequence') or '0')
if tonumber(ARGV[1]) <= last then return 0 end
local maxlen = tonumber(redis.call('HGET', KEYS[1], 'events_max_len') or '{DEFAULT_EVENTS_MAX_LEN}')
redis.call('XADD', KEYS[2], 'MAXLEN', '=', maxlen, ARGV[1] .. '-0', 'e', ARGV[2])
redis.call('PERSIST', KEYS[2])
redis.call('HSET', KEYS[1], 'last_sequence', ARGV[1], 'last_event', ARGV[2], 'phase', ARGV[3])
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'feedback', ARGV[7]) end
if ARGV[9] ~= '' then redis.call('HSET', KEYS[1], 'checkpoint_step', ARGV[9]) end
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], 'finished_at_ms', ARGV[5])
  redis.call('EXPIRE', KEYS[2], ARGV[6])
  redis.call('ZADD', KEYS[3], ARGV[5], ARGV[10])
end
return 1
"""


def _published(event: progress_pb2.ProgressEvent, result: int, fence: int) -> bool:
    """What the publish script's answer says: published (True), already there (False), or raises."""
    if result == -1:
        raise KeyError(f"no job {event.job_id}")
    if result == -2:
        raise LeaseLostError(f"job {event.job_id} moved to another host (this publisher holds fence {fence}); "
                             f"event {event.sequence} refused")
    return bool(result == 1)


def sequence_of(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[0])


def decode_entry(fields: dict[bytes, bytes]) -> progress_pb2.ProgressEvent:
    return progress_pb2.ProgressEvent.FromString(fields[EVENT_FIELD])


class EventLog:
    """Publish and read the event streams of a fleet's jobs."""

    def __init__(self, connection: redis.Redis) -> None:
        self.redis: Any = connection  # redis-py's stubs type replies as unions of every RESP type
        self._publish = connection.register_script(_PUBLISH)

    def publish(self, event: progress_pb2.ProgressEvent, feedback: progress_pb2.Feedback | None = None,
                pipeline: Any = None, fence: int = 0) -> bool:
        """Append a stamped event (job_id and sequence set); False when it was already there. With a pipeline
        (the caller's transaction) the publish is queued there and True returned. With a fence, raises
        LeaseLostError when the job has moved to another holder."""
        result = self._queue_publish(pipeline or self.redis, event, feedback, fence)
        return True if pipeline is not None else _published(event, result, fence)

    def _queue_publish(self, client: Any, event: progress_pb2.ProgressEvent, feedback: progress_pb2.Feedback | None,
                       fence: int) -> Any:
        return self._publish(keys=[job_key(event.job_id), events_key(event.job_id), FINISHED],
                             args=[event.sequence, event.SerializeToString(), event.phase,
                                   int(event.phase in TERMINAL_PHASES), now_ms(), EVENTS_RETENTION_S,
                                   feedback.SerializeToString() if feedback is not None else b"", fence,
                                   event.step if event.phase == progress_pb2.PHASE_CHECKPOINTING else "",
                                   event.job_id],
                             client=client)

    def publish_in_order(self, events: list[tuple[progress_pb2.ProgressEvent, progress_pb2.Feedback | None]],
                         fence: int = 0) -> int:
        """Publish (event, Feedback) pairs oldest first, a page at a time, each page confirmed on a replica
        (fleet.durability) before it counts: a page a failover may have lost is published again (the stream's ids
        make that harmless). Stops at the first Redis error: the stream refuses an event older than its newest, so
        publishing past a gap would lose the gap for good. Returns how many are in the stream now (published, or
        already there); LeaseLostError and KeyError as publish raises them."""
        for start in range(0, len(events), PUBLISH_PAGE):
            page = events[start:start + PUBLISH_PAGE]

            def queue(pipe: Any, page: list[tuple[progress_pb2.ProgressEvent, Any]] = page) -> None:
                for event, feedback in page:
                    self._queue_publish(pipe, event, feedback, fence)
            try:
                replies = durability.pipelined(self.redis, "events", queue)
            except redis.RedisError as e:
                log.warning("events.publish_waiting", sequence=page[0][0].sequence, waiting=len(events) - start,
                            error=str(e))
                return start
            for (event, _), result in zip(page, replies, strict=True):
                _published(event, result, fence)
        return len(events)

    def last_sequence(self, job_id: str) -> int:
        value = self.redis.hget(job_key(job_id), "last_sequence")
        return int(value or 0)

    def read_after(self, job_id: str, after_sequence: int, count: int) -> list[progress_pb2.ProgressEvent]:
        """Up to `count` kept events with sequence > after_sequence, in order."""
        rows = self.redis.xrange(events_key(job_id), min=f"({after_sequence}-0" if after_sequence else "-",
                                 max="+", count=count)
        return [decode_entry(fields) for _, fields in rows]

    def at(self, job_id: str, sequence: int) -> progress_pb2.ProgressEvent | None:
        """The kept event with this sequence, or None when the stream does not hold it."""
        rows = self.redis.xrange(events_key(job_id), min=f"{sequence}-0", max=f"{sequence}-0", count=1)
        return decode_entry(rows[0][1]) if rows else None

    def first_sequence(self, job_id: str) -> int:
        """The oldest sequence still kept, or 0 when the stream is empty or gone."""
        rows = self.redis.xrange(events_key(job_id), count=1)
        return sequence_of(rows[0][0]) if rows else 0

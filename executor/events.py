"""Progress events over Redis Streams: one stream per job, entry id = the event's sequence.

Because the entry id is "<sequence>-0", Redis itself refuses an event that is not newer than the last one:
order and exactly-once are structural, and a publisher that retries (or a second publisher backfilling from
progress.jsonl) cannot duplicate an event. The publish script also updates the job record (phase, last event)
in the same atomic step, and trims the stream to the job's events_max_len (oldest first; the newest — hence
a terminal event — is always kept, and the job record keeps the last event even after the stream expires).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis
import structlog
from tunefleet.v1 import progress_pb2

from executor.progress import TERMINAL_PHASES, JsonlProgressSink
from executor.store import DEFAULT_EVENTS_MAX_LEN, EVENTS_RETENTION_S, events_key, job_key, now_ms

log = structlog.get_logger("executor.events")
EVENT_FIELD = b"e"

# KEYS: job hash, stream. ARGV: sequence, event bytes, phase, terminal (0/1), now ms, retention s, Feedback bytes
# (stored with the event that carries it, so a client that sees DONE also sees the job's Feedback).
# Returns 1 published, 0 already there (not newer than the last event), -1 no such job.
_PUBLISH = f"""
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local last = tonumber(redis.call('HGET', KEYS[1], 'last_sequence') or '0')
if tonumber(ARGV[1]) <= last then return 0 end
local maxlen = tonumber(redis.call('HGET', KEYS[1], 'events_max_len') or '{DEFAULT_EVENTS_MAX_LEN}')
redis.call('XADD', KEYS[2], 'MAXLEN', '=', maxlen, ARGV[1] .. '-0', 'e', ARGV[2])
redis.call('PERSIST', KEYS[2])
redis.call('HSET', KEYS[1], 'last_sequence', ARGV[1], 'last_event', ARGV[2], 'phase', ARGV[3])
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'feedback', ARGV[7]) end
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], 'finished_at_ms', ARGV[5])
  redis.call('EXPIRE', KEYS[2], ARGV[6])
end
return 1
"""


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
                pipeline: Any = None) -> bool:
        """Append a stamped event (job_id and sequence set); False when it was already there. With a pipeline
        (the caller's transaction) the publish is queued there and True returned."""
        result = self._publish(keys=[job_key(event.job_id), events_key(event.job_id)],
                               args=[event.sequence, event.SerializeToString(), event.phase,
                                     int(event.phase in TERMINAL_PHASES), now_ms(), EVENTS_RETENTION_S,
                                     feedback.SerializeToString() if feedback is not None else b""],
                               client=pipeline)
        if pipeline is not None:
            return True
        if result == -1:
            raise KeyError(f"no job {event.job_id}")
        return bool(result == 1)

    def last_sequence(self, job_id: str) -> int:
        value = self.redis.hget(job_key(job_id), "last_sequence")
        return int(value or 0)

    def read_after(self, job_id: str, after_sequence: int, count: int) -> list[progress_pb2.ProgressEvent]:
        """Up to `count` kept events with sequence > after_sequence, in order."""
        rows = self.redis.xrange(events_key(job_id), min=f"({after_sequence}-0" if after_sequence else "-",
                                 max="+", count=count)
        return [decode_entry(fields) for _, fields in rows]

    def first_sequence(self, job_id: str) -> int:
        """The oldest sequence still kept, or 0 when the stream is empty or gone."""
        rows = self.redis.xrange(events_key(job_id), count=1)
        return sequence_of(rows[0][0]) if rows else 0


class RedisProgressSink:
    """A ProgressSink that writes progress.jsonl (the run's local record) and publishes each event to the job's
    stream. Sequences continue from whichever is further along, the file or the stream (events written by the
    service while the job was queued). A Redis error never stops training: the event is in the file, and the
    worker backfills the stream from it."""

    def __init__(self, redis_url: str, path: Path, job_id: str) -> None:
        self._events = EventLog(redis.Redis.from_url(redis_url, socket_timeout=5))
        self.job_id = job_id
        try:
            floor = self._events.last_sequence(job_id)
        except redis.RedisError as e:
            log.warning("events.redis_unavailable", error=str(e))
            floor = 0
        self._file = JsonlProgressSink(path, job_id, start_after=floor)

    def emit(self, event: progress_pb2.ProgressEvent,
             feedback: progress_pb2.Feedback | None = None) -> progress_pb2.ProgressEvent:
        stamped = self._file.emit(event)
        try:
            self._events.publish(stamped, feedback)
        except (redis.RedisError, KeyError) as e:
            log.warning("events.publish_failed", sequence=stamped.sequence, error=str(e))
        return stamped

    def close(self) -> None:
        self._file.close()
        self._events.redis.close()

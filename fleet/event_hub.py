"""The Watch fan-out over Redis Streams: one background thread reads every watched job's stream with a single
blocking XREAD and hands new events to each subscriber's bounded queue, so 200 watchers cost one Redis
connection, not 200. The hub's own wake-up stream (fleet.keys.hub_key, expiring) is part of every read, so a
newly watched stream joins at once. A subscriber whose queue fills is marked overflowed and gets nothing more
(its watcher goes back to reading history), so a slow client cannot grow the server.
"""

from __future__ import annotations

import queue
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import redis
import structlog
from tunefleet.v1 import progress_pb2

from fleet.events import decode_entry
from fleet.keys import events_key, hub_key

log = structlog.get_logger("fleet.event_hub")
WATCHER_QUEUE_MAX = 2_000
HUB_BLOCK_MS = 1_000  # longest a shared XREAD blocks; a newly watched stream wakes it at once
HUB_WAKE_TTL_S = 3600
HUB_READ_COUNT = 1_000


@dataclass
class Subscriber:
    job_id: str
    events: queue.Queue[progress_pb2.ProgressEvent] = field(
        default_factory=lambda: queue.Queue(maxsize=WATCHER_QUEUE_MAX))
    overflowed: bool = False


class StreamHub:
    """Fans one blocking XREAD over every watched stream out to the watchers' queues."""

    def __init__(self, connection: redis.Redis) -> None:
        self._redis: Any = connection
        self._lock = threading.Lock()
        self._subscribers: dict[str, list[Subscriber]] = {}
        # A stream of this hub's own, always in the XREAD: a write to it wakes the read to add a new stream.
        self._wake_key = hub_key(uuid.uuid4().hex)
        self._positions: dict[str, bytes] = {self._wake_key: b"0-0"}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stream-hub", daemon=True)
        self._thread.start()

    def subscribe(self, job_id: str) -> Subscriber:
        sub = Subscriber(job_id)
        key = events_key(job_id)
        with self._lock:
            new = key not in self._positions
            if new:
                last = self._redis.xrevrange(key, count=1)
                self._positions[key] = last[0][0] if last else b"0-0"
            self._subscribers.setdefault(key, []).append(sub)
        if new:
            pipe = self._redis.pipeline(transaction=False)
            pipe.xadd(self._wake_key, {b"w": b"1"}, maxlen=1)
            pipe.expire(self._wake_key, HUB_WAKE_TTL_S)
            pipe.execute()
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        key = events_key(sub.job_id)
        with self._lock:
            subs = self._subscribers.get(key, [])
            if sub in subs:
                subs.remove(sub)
            if not subs:
                self._subscribers.pop(key, None)
                self._positions.pop(key, None)

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        try:
            self._redis.delete(self._wake_key)
        except redis.RedisError as e:  # Redis is gone: the key expires on its own (HUB_WAKE_TTL_S)
            log.warning("watch.hub_cleanup_failed", error=str(e))

    def _loop(self) -> None:
        while not self._stopped.is_set():
            with self._lock:
                positions = dict(self._positions)
            try:
                rows = self._redis.xread(positions, count=HUB_READ_COUNT, block=HUB_BLOCK_MS)
            except redis.RedisError as e:
                log.warning("watch.hub_read_failed", error=str(e))
                self._stopped.wait(1.0)
                continue
            for key, entries in rows or []:
                key_text = key.decode() if isinstance(key, bytes) else key
                if key_text == self._wake_key:
                    with self._lock:
                        self._positions[key_text] = entries[-1][0]
                    continue
                events = [decode_entry(fields) for _, fields in entries]
                with self._lock:
                    if key_text in self._positions:
                        self._positions[key_text] = entries[-1][0]
                    subs = list(self._subscribers.get(key_text, []))
                for sub in subs:
                    for event in events:
                        try:
                            sub.events.put_nowait(event)
                        except queue.Full:
                            sub.overflowed = True
                            break

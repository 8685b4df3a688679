"""Watch: replay a job's kept events after a sequence, then tail live ones, with heartbeats on an idle stream.

One background thread per service (the StreamHub) reads every watched stream with a single blocking XREAD
and hands new events to each watcher's bounded queue, so 200 watchers cost one Redis connection, not 200;
the hub's own wake-up stream (tunefleet:v1:hub:<id>, expiring) is part of every read, so a newly watched
stream joins at once.
A watcher subscribes before it replays and drops anything at or below the last sequence it sent, so the
hand-over from history to live events can neither lose nor repeat an event. A watcher that falls more than
WATCHER_QUEUE_MAX events behind goes back to reading history, so a slow client cannot grow the server.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import redis
import structlog
from google.protobuf import timestamp_pb2
from tunefleet.v1 import executor_pb2, progress_pb2

from fleet.events import EventLog, decode_entry
from fleet.jobs import PREFIX, JobStore, events_key
from spec.progress import TERMINAL_PHASES

log = structlog.get_logger("executor.service.watch")
DEFAULT_HEARTBEAT_INTERVAL_S = 5.0
REPLAY_PAGE = 500  # events per XRANGE while replaying history
WATCHER_QUEUE_MAX = 2_000
HUB_BLOCK_MS = 1_000  # longest a shared XREAD blocks; a newly watched stream wakes it at once
HUB_WAKE_TTL_S = 3600
HUB_READ_COUNT = 1_000


@dataclass
class _Subscriber:
    job_id: str
    events: queue.Queue[progress_pb2.ProgressEvent] = field(
        default_factory=lambda: queue.Queue(maxsize=WATCHER_QUEUE_MAX))
    overflowed: bool = False


class StreamHub:
    """Fans one blocking XREAD over every watched stream out to the watchers' queues."""

    def __init__(self, connection: redis.Redis) -> None:
        self._redis: Any = connection
        self._lock = threading.Lock()
        self._subscribers: dict[str, list[_Subscriber]] = {}
        # A stream of this hub's own, always in the XREAD: a write to it wakes the read to add a new stream.
        self._wake_key = f"{PREFIX}hub:{uuid.uuid4().hex}"
        self._positions: dict[str, bytes] = {self._wake_key: b"0-0"}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stream-hub", daemon=True)
        self._thread.start()

    def subscribe(self, job_id: str) -> _Subscriber:
        sub = _Subscriber(job_id)
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

    def unsubscribe(self, sub: _Subscriber) -> None:
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


def _heartbeat() -> executor_pb2.WatchResponse:
    now = timestamp_pb2.Timestamp()
    now.GetCurrentTime()
    return executor_pb2.WatchResponse(heartbeat=executor_pb2.Heartbeat(time=now))


class Watcher:
    """One Watch call's stream of WatchResponses."""

    def __init__(self, store: JobStore, events: EventLog, hub: StreamHub, heartbeat_interval_s: float,
                 is_active: Callable[[], bool]) -> None:
        self.store, self.events, self.hub = store, events, hub
        self.heartbeat_interval_s = heartbeat_interval_s
        self.is_active = is_active

    def stream(self, job_id: str, after_sequence: int) -> Iterator[executor_pb2.WatchResponse]:
        self.store.raw(job_id)  # NOT_FOUND before anything is sent
        sub = self.hub.subscribe(job_id)
        try:
            yield from self._stream(job_id, after_sequence, sub)
        finally:
            self.hub.unsubscribe(sub)

    def _stream(self, job_id: str, after: int, sub: _Subscriber) -> Iterator[executor_pb2.WatchResponse]:
        sent = after
        first = self.events.first_sequence(job_id)
        if first and first > after + 1:
            yield executor_pb2.WatchResponse(
                history_trimmed=executor_pb2.HistoryTrimmed(first_available_sequence=first))
        elif not first:
            last = self.store.get(job_id, with_plan=False).last_event
            if last.sequence > after:  # the stream expired; the job record keeps its last event
                yield executor_pb2.WatchResponse(
                    history_trimmed=executor_pb2.HistoryTrimmed(first_available_sequence=last.sequence))
                yield executor_pb2.WatchResponse(event=last)
                sent = last.sequence
                if last.phase in TERMINAL_PHASES:
                    return
        # History first, then live events; history again whenever this watcher fell behind the hub. Draining the
        # queue before reading history loses nothing: history reaches at least as far as anything queued.
        catch_up, idle_since = True, time.monotonic()
        while self.is_active():
            if catch_up or sub.overflowed:
                catch_up, sub.overflowed = False, False
                _drain(sub)
                for event in self._history(job_id, sent):
                    yield executor_pb2.WatchResponse(event=event)
                    sent = event.sequence
                    if event.phase in TERMINAL_PHASES:
                        return
                continue
            wait_s = max(0.0, self.heartbeat_interval_s - (time.monotonic() - idle_since))
            try:
                event = sub.events.get(timeout=min(wait_s, 1.0))
            except queue.Empty:
                if time.monotonic() - idle_since >= self.heartbeat_interval_s:
                    yield _heartbeat()
                    idle_since = time.monotonic()
                continue
            if event.sequence <= sent:
                continue
            yield executor_pb2.WatchResponse(event=event)
            sent = event.sequence
            idle_since = time.monotonic()
            if event.phase in TERMINAL_PHASES:
                return

    def _history(self, job_id: str, after: int) -> Iterator[progress_pb2.ProgressEvent]:
        """Every kept event after `after`, page by page."""
        while True:
            page = self.events.read_after(job_id, after, REPLAY_PAGE)
            yield from page
            if len(page) < REPLAY_PAGE:
                return
            after = page[-1].sequence


def _drain(sub: _Subscriber) -> None:
    while True:
        try:
            sub.events.get_nowait()
        except queue.Empty:
            return

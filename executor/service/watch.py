"""Watch: replay a job's kept events after a sequence, then tail live ones, with heartbeats on an idle stream.

Live events come from the service's one StreamHub (fleet.event_hub), which fans a single blocking read over
every watched stream out to the watchers' bounded queues.
A watcher subscribes before it replays and drops anything at or below the last sequence it sent, so the
hand-over from history to live events can neither lose nor repeat an event. A watcher that falls more than
fleet.event_hub.WATCHER_QUEUE_MAX events behind goes back to reading history, so a slow client cannot grow the server.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator

import structlog
from google.protobuf import timestamp_pb2
from tunefleet.v1 import executor_pb2, progress_pb2

from contract.progress import TERMINAL_PHASES
from fleet.event_hub import StreamHub, Subscriber
from fleet.events import EventLog
from fleet.jobs import JobStore

log = structlog.get_logger("executor.service.watch")
DEFAULT_HEARTBEAT_INTERVAL_S = 5.0
REPLAY_PAGE = 500  # events per read while replaying history


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
        self.store.record(job_id, ("schema",))  # NOT_FOUND before anything is sent
        sub = self.hub.subscribe(job_id)
        try:
            yield from self._stream(job_id, after_sequence, sub)
        finally:
            self.hub.unsubscribe(sub)

    def _stream(self, job_id: str, after: int, sub: Subscriber) -> Iterator[executor_pb2.WatchResponse]:
        sent = after
        last = self.store.get(job_id, with_plan=False).last_event
        if last.phase in TERMINAL_PHASES and last.sequence <= after:
            yield executor_pb2.WatchResponse(event=last)  # nothing after it will ever come: say how it ended
            return
        first = self.events.first_sequence(job_id)
        if first and first > after + 1:
            yield executor_pb2.WatchResponse(
                history_trimmed=executor_pb2.HistoryTrimmed(first_available_sequence=first))
        elif not first and last.sequence > after:  # the stream expired; the job record keeps its last event
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


def _drain(sub: Subscriber) -> None:
    while True:
        try:
            sub.events.get_nowait()
        except queue.Empty:
            return

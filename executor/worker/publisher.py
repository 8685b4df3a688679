"""The single publisher of a running job's events: the worker that holds the job.

Rank 0 writes the run's events to progress.jsonl and nothing else; the worker writes its own events (host took
the job, gang formed, how the run ended) to the same file, numbered after everything before them, and tails the
file into the job's Redis stream in order, under its fencing token (a stale one is refused by Redis). What Redis
does not take (an outage) waits in a bounded backlog and is published when Redis is back; nothing is lost, and
the stream's sequence ids make a second try harmless.

The file and the stream agree: when a worker takes a job, the events the fleet wrote while the job waited
(queued, a lost host, a retry) are added to the file first, so the run numbers its events after them.

Taking a job replaces the file (a new one renamed over it), which fences the file itself: rank 0 and the launcher
open it once when they start and write through that handle, so a stale run (its host paused, or cut off, past
its lease) that still writes — its "still the holder?" could not be answered, or came before the pause — writes
into the replaced file, which nobody reads.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import redis
import structlog
from google.protobuf import json_format
from tunefleet.v1 import progress_pb2

from contract.errors import LeaseLostError
from contract.progress import JsonlProgressSink, ProgressTail, event_to_json, read_events
from fleet.events import EventLog
from fleet.leases import FenceGuard

log = structlog.get_logger("executor.worker.publisher")
ADOPT_PAGE = 500  # stream events read per page when a worker adopts them into the file
FLUSH_RETRY_S = 1.0  # between publish attempts after a run, on top of the Redis client's own retries


class Publisher:
    def __init__(self, events: EventLog, progress_path: Path, summary_path: Path, job_id: str, fence: int) -> None:
        self.events = events
        self.path, self.summary_path = progress_path, summary_path
        self.job_id, self.fence = job_id, fence
        self._tail = ProgressTail(progress_path)
        self._backlog: list[progress_pb2.ProgressEvent] = []
        self.lease_lost = False
        self._pause = threading.Event()  # never set: a bounded wait between attempts

    def adopt(self) -> None:
        """Make the file agree with the stream, as a new file, then follow it from its end. Events at the file's
        end that the stream does not hold as they are (a holder whose worker died wrote them, and the fleet has
        numbered its own events since) are left out; the stream's events after the last one both hold (written by
        the fleet while the job waited) are added. LeaseLostError, writing nothing, when the job moved on."""
        events = read_events(self.path)
        last = self.events.last_sequence(self.job_id)
        agreed = len(events)
        while agreed and not self._in_stream(events[agreed - 1], last):
            agreed -= 1
        if agreed < len(events):
            log.warning("events.unpublished_dropped", count=len(events) - agreed,
                        sequences=[e.sequence for e in events[agreed:]][:20])
        kept = events[:agreed]
        after = kept[-1].sequence if kept else 0
        while page := self.events.read_after(self.job_id, after, ADOPT_PAGE):
            kept += page
            after = page[-1].sequence
        FenceGuard(self.events.redis, self.job_id, self.fence).confirm()  # a stale worker replaces nothing
        self._tail = ProgressTail(self.path, offset=_rewrite(self.path, kept))  # all of it is in the stream

    def _in_stream(self, event: progress_pb2.ProgressEvent, last_sequence: int) -> bool:
        """The stream holds this event (or can no longer say: the entry was trimmed, which only happens to events
        it once held)."""
        if event.sequence > last_sequence:
            return False
        kept = self.events.at(self.job_id, event.sequence)
        return kept is None or kept == event

    def emit(self, event: progress_pb2.ProgressEvent) -> progress_pb2.ProgressEvent:
        """One event of the worker's own: into the file, numbered after everything before it (the stream's
        events included), then published with whatever else is new in the file."""
        try:
            floor = self.events.last_sequence(self.job_id)
        except redis.RedisError:
            floor = 0
        sink = JsonlProgressSink(self.path, self.job_id, start_after=floor)
        try:
            stamped = sink.emit(event)
        finally:
            sink.close()
        self.pump()
        return stamped

    def pump(self) -> bool:
        """Publish the file's new events in order; False while some still wait for Redis. After LeaseLostError
        (the job moved to another holder) nothing more is published."""
        self._backlog += self._tail.read_new()
        if self.lease_lost or not self._backlog:
            self._backlog.clear()
            return True
        try:
            published = self.events.publish_in_order([(e, self._feedback(e)) for e in self._backlog], self.fence)
        except (KeyError, LeaseLostError) as e:
            log.warning("events.publish_refused", error=str(e))
            self.lease_lost = isinstance(e, LeaseLostError)
            published = len(self._backlog)
        del self._backlog[:published]
        return not self._backlog

    def flush(self, within_s: float) -> None:
        """After the run: keep publishing what Redis missed for up to within_s (each try waits out the client's
        own retries); what is still missing then stays in progress.jsonl."""
        give_up_at = time.monotonic() + within_s
        while not self.pump() and time.monotonic() < give_up_at:
            self._pause.wait(FLUSH_RETRY_S)

    def _feedback(self, event: progress_pb2.ProgressEvent) -> progress_pb2.Feedback | None:
        """With the run's DONE: its measured-against-predicted record, from the summary.json it wrote before."""
        if event.phase != progress_pb2.PHASE_DONE:
            return None
        try:
            recorded = json.loads(self.summary_path.read_text())["feedback"]
        except (OSError, ValueError, KeyError):
            return None
        return json_format.ParseDict(recorded, progress_pb2.Feedback(), ignore_unknown_fields=True)


def _rewrite(path: Path, events: list[progress_pb2.ProgressEvent]) -> int:
    """A new file holding exactly these events, renamed over the old one (a writer holding that open writes into
    the old one from then on); its size in bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    written = "".join(event_to_json(e) + "\n" for e in events).encode()
    with partial.open("wb") as f:
        f.write(written)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)
    return len(written)

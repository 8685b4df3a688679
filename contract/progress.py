"""Progress events and the file that carries them: rank 0 appends each event to the run's progress.jsonl, and
that file is the run's only output of events. A fleet worker tails it and is the single publisher of the job's
events to Redis (executor.worker.publisher); `tunefleet train` tails it for the terminal.

Each event is stamped with the job id, a sequence that grows by one per event and never repeats (it continues
across restarts of the same job, and after the events the fleet wrote while the job waited), and the time.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from google.protobuf import json_format
from tunefleet.v1 import progress_pb2

from common.units import GiB
from contract.holder import Holder, OwnDirectory

DEFAULT_PROGRESS_INTERVAL_S = 10.0  # seconds between a run's training events
TERMINAL_PHASES = frozenset({progress_pb2.PHASE_DONE, progress_pb2.PHASE_FAILED, progress_pb2.PHASE_CANCELLED})


class ProgressSink(Protocol):
    def emit(self, event: progress_pb2.ProgressEvent) -> progress_pb2.ProgressEvent:
        """Record one event; returns it with job id, sequence and time filled in."""
        ...

    def close(self) -> None: ...


def event_to_json(event: progress_pb2.ProgressEvent) -> str:
    return json.dumps(json_format.MessageToDict(event, preserving_proto_field_name=True), sort_keys=True)


def event_from_json(line: str) -> progress_pb2.ProgressEvent:
    return json_format.Parse(line, progress_pb2.ProgressEvent())


def read_events(path: Path) -> list[progress_pb2.ProgressEvent]:
    """Every complete event in a JSON-lines progress file; a line cut by a crash is skipped."""
    return ProgressTail(path).read_new()


def new_event(job_id: str, sequence: int, phase: int, **fields: Any) -> progress_pb2.ProgressEvent:
    """An event stamped with its job, sequence and the current time."""
    event = progress_pb2.ProgressEvent(job_id=job_id, sequence=sequence, phase=phase, **fields)  # type: ignore
    event.time.GetCurrentTime()
    return event


# Lines a run's log may end with that never say why it failed, left out of the tail a user is shown: nanobind's
# leak report at interpreter exit ("nanobind: leaked 3 instances!", "- leaked type ...", "nanobind: this is likely
# caused by a reference counting issue ..."; nanobind's nb_internals.cpp), which can fill a 15-line tail.
LOG_NOISE = re.compile(r"^\s*(nanobind: |- leaked (instance|type|function) )")


def log_tail(path: Path, lines: int) -> str:
    """The last non-blank lines of a run's log ('' when it cannot be read) that are not known noise (LOG_NOISE), for
    error messages."""
    try:
        kept = [line for line in path.read_text(errors="replace").splitlines()
                if line.strip() and not LOG_NOISE.match(line)]
    except OSError:
        return ""
    return "\n".join(kept[-lines:])


class ProgressTail:
    """Reads a JSON-lines progress file incrementally: each call returns only the complete events written since
    the last one (a line still being written is left for the next call), so following a run costs O(new bytes)."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self._offset = offset  # bytes already read (or known to be published)

    def read_new(self) -> list[progress_pb2.ProgressEvent]:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        complete = chunk[:chunk.rfind(b"\n") + 1]
        self._offset += len(complete)
        return _parse(complete)


def _parse(complete: bytes) -> list[progress_pb2.ProgressEvent]:
    """The events in whole lines of a progress file; a line cut by a killed writer is skipped."""
    events = []
    for line in complete.decode("utf-8", errors="replace").splitlines():
        try:
            events.append(event_from_json(line))
        except json_format.ParseError:
            continue
    return events


class JsonlProgressSink:
    """Appends one JSON object per line; flushed and fsynced so a killed run keeps every event it emitted. Each
    write first asks the holder whether this run still holds its job (LeaseLostError: nothing is written). The file
    is opened once, here: a worker that takes the job from a stale run replaces it (executor.worker.publisher), and
    whatever the stale run still writes goes into the file it opened, which nobody reads any more."""

    def __init__(self, path: Path, job_id: str, start_after: int = 0, holder: Holder | None = None) -> None:
        self.path = path
        self.job_id = job_id
        self.holder = holder or OwnDirectory()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a+b")
        self._sequence = start_after
        written = self._number_after_written()
        if written and not written.endswith(b"\n"):
            self._file.write(b"\n")  # end a line cut by a killed writer, so the next event starts clean

    def catch_up(self) -> None:
        """Number the next event after every event in the file this sink opened (another writer, rank 0, may have
        added some since)."""
        self._number_after_written()

    def _number_after_written(self) -> bytes:
        """What the file this sink opened holds; the next event is numbered after the highest sequence in it, not
        the last line's (a line may be cut or out of order)."""
        self._file.seek(0)
        written = self._file.read()
        self._sequence = max([self._sequence, *(e.sequence for e in _parse(written))])
        return written

    def emit(self, event: progress_pb2.ProgressEvent) -> progress_pb2.ProgressEvent:
        self.holder.confirm()  # False (cannot say now) writes all the same: the worker's publish checks the fence
        return self.write(self.stamp(event))

    def stamp(self, event: progress_pb2.ProgressEvent) -> progress_pb2.ProgressEvent:
        """A copy of the event with this job's id, the next sequence and the time."""
        self._sequence += 1
        stamped = progress_pb2.ProgressEvent()
        stamped.CopyFrom(event)
        stamped.job_id, stamped.sequence = self.job_id, self._sequence
        stamped.time.GetCurrentTime()
        return stamped

    def write(self, stamped: progress_pb2.ProgressEvent) -> progress_pb2.ProgressEvent:
        self._file.write((event_to_json(stamped) + "\n").encode())  # opened to append: always at the end
        self._file.flush()
        os.fsync(self._file.fileno())
        return stamped

    def close(self) -> None:
        self._file.close()


# The fields a terminal line shows, in order, each only when set.
_DESCRIBED: tuple[tuple[str, Callable[[progress_pb2.ProgressEvent], str]], ...] = (
    ("total_steps", lambda e: f"step {e.step}/{e.total_steps}"),
    ("loss", lambda e: f"loss {e.loss:.4f}"),
    ("learning_rate", lambda e: f"lr {e.learning_rate:.2e}"),
    ("tokens_per_s", lambda e: f"{e.tokens_per_s:,.0f} tok/s"),
    ("peak_gpu_memory_bytes", lambda e: f"gpu peak {e.peak_gpu_memory_bytes / GiB:.2f} GiB"),
    ("peak_host_memory_bytes", lambda e: f"host peak {e.peak_host_memory_bytes / GiB:.2f} GiB"),
    ("eta_s", lambda e: f"eta {e.eta_s:,.0f} s"),
    ("checkpoint_path", lambda e: f"checkpoint {e.checkpoint_path}"),
    ("message", lambda e: e.message),
)


def describe(event: progress_pb2.ProgressEvent) -> str:
    """One human line for a terminal."""
    phase = progress_pb2.Phase.Name(event.phase).removeprefix("PHASE_").lower()
    return "  ".join([f"[{phase}]", *(text(event) for name, text in _DESCRIBED if getattr(event, name))])

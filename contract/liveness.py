"""Whether a run is still making progress, as files between the ranks and the worker that supervises them: rank 0
writes a heartbeat after every step (and says when it checkpoints), every rank dumps its Python stacks into a file
of its own when asked (SIGUSR2). Pure functions over those files' contents, and the small reads and writes."""

from __future__ import annotations

import json
import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path

HEARTBEAT_FILE = "heartbeat.json"
TRAINING = "training"
CHECKPOINTING = "checkpointing"
# The signal a worker sends every rank of a run it found hung: each dumps every thread's stack (faulthandler).
DUMP_SIGNAL = signal.SIGUSR2


@dataclass(frozen=True)
class Heartbeat:
    step: int
    step_s: float  # a step's recent duration (moving average)
    phase: str  # TRAINING, or CHECKPOINTING (a long write, never judged hung)
    at_s: float  # wall time it was written (the file's modification time)


def heartbeat_path(output_dir: Path) -> Path:
    return output_dir / HEARTBEAT_FILE


def stacks_path(output_dir: Path, rank: int) -> Path:
    """Where a rank's stacks go when the worker asks for them."""
    return output_dir / "logs" / f"stacks-rank{rank}.txt"


def write_heartbeat(path: Path, step: int, step_s: float, phase: str = TRAINING) -> None:
    """Replaced whole (rename), so that a reader never sees half a heartbeat."""
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps({"step": step, "step_s": step_s, "phase": phase}))
    os.replace(partial, path)


def read_heartbeat(path: Path) -> Heartbeat | None:
    """The last heartbeat, or None before the first step (or when the file is unreadable)."""
    try:
        at_s = path.stat().st_mtime
        fields = json.loads(path.read_text())
        return Heartbeat(int(fields["step"]), float(fields["step_s"]), str(fields["phase"]), at_s)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stalled_s(beat: Heartbeat | None, now_s: float, factor: float, floor_s: float) -> float | None:
    """How long the run has gone without completing a step, when that is longer than `factor` of its step time
    and `floor_s`, and it is training (not loading, not checkpointing); None while it is making progress."""
    if beat is None or beat.phase != TRAINING:
        return None
    silent_s = now_s - beat.at_s
    return silent_s if silent_s > max(factor * beat.step_s, floor_s) else None


_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')


def stuck_frame(dump: str) -> str | None:
    """The innermost frame of the thread that took the signal (faulthandler: "Current thread", most recent call
    first), else of the first thread listed: "function (file:line)", the file shortened to its last two parts."""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump.strip())
    current = [b for b in blocks if b.startswith("Current thread")]
    for block in current or blocks:
        for line in block.splitlines():
            found = _FRAME.match(line)
            if found:
                short = "/".join(Path(found["file"]).parts[-2:])
                return f"{found['function']} ({short}:{found['line']})"
    return None

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
# The module each rank runs: the launcher (or torchrun's agent, on a gang's node) starts it, the worker's hang watch
# finds ranks by it.
RANK_MODULE = "executor.training.rank"
TRAINING = "training"
CHECKPOINTING = "checkpointing"
# The signal a worker sends every rank of a run it found hung: each dumps every thread's stack (faulthandler).
DUMP_SIGNAL = signal.SIGUSR2
# A checkpoint write is judged against its own time (the last one's, × the factor); one never timed yet (the first,
# or the final export) is allowed this many floors: a full model's states to network storage can take many minutes.
CHECKPOINT_FLOOR_FACTOR = 3.0


@dataclass(frozen=True)
class Heartbeat:
    step: int
    step_s: float  # a step's recent duration (moving average)
    phase: str  # TRAINING, or CHECKPOINTING (a long write, judged against its own bound)
    at_s: float  # wall time it was written (the file's modification time)
    checkpoint_s: float = 0.0  # how long the last complete checkpoint took; 0 before the first


def heartbeat_path(output_dir: Path) -> Path:
    return output_dir / HEARTBEAT_FILE


def stacks_path(output_dir: Path, rank: int) -> Path:
    """Where a rank's stacks go when the worker asks for them."""
    return output_dir / "logs" / f"stacks-rank{rank}.txt"


def write_heartbeat(path: Path, step: int, step_s: float, phase: str = TRAINING, checkpoint_s: float = 0.0) -> None:
    """Replaced whole (rename), so that a reader never sees half a heartbeat."""
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps({"step": step, "step_s": step_s, "phase": phase, "checkpoint_s": checkpoint_s}))
    os.replace(partial, path)


def read_heartbeat(path: Path) -> Heartbeat | None:
    """The last heartbeat, or None before the first step (or when the file is unreadable)."""
    try:
        at_s = path.stat().st_mtime
        fields = json.loads(path.read_text())
        return Heartbeat(int(fields["step"]), float(fields["step_s"]), str(fields["phase"]), at_s,
                         float(fields.get("checkpoint_s", 0.0)))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stalled_s(beat: Heartbeat | None, now_s: float, factor: float, floor_s: float) -> float | None:
    """How long the run has gone without a sign of progress, once that is longer than its bound; None while it
    makes progress, and while it loads (no heartbeat yet). Training: max(factor × its step time, floor_s).
    Checkpointing: max(factor × the last checkpoint's time, CHECKPOINT_FLOOR_FACTOR × floor_s) — a rank stopped
    during a write stalls every other rank in it, so a write is never exempt."""
    if beat is None:
        return None
    silent_s = now_s - beat.at_s
    if beat.phase == CHECKPOINTING:
        bound_s = max(factor * beat.checkpoint_s, CHECKPOINT_FLOOR_FACTOR * floor_s)
    else:
        bound_s = max(factor * beat.step_s, floor_s)
    return silent_s if silent_s > bound_s else None


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

"""What the fleet worker's supervision of a training process tree shares, leader and members alike: how a run
ended (Outcome), the supervision cadence, and stopping and quoting a tree."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from contract.progress import log_tail
from contract.run_config import launcher_log_path, node_log_path

SUPERVISE_POLL_S = 0.2  # how often a running job checks for Cancel, shutdown, timeout and new events
STOP_GRACE_S = 60.0  # after an interrupt, how long the tree gets to stop before it is killed
LOG_TAIL_LINES = 20  # lines of a node's log quoted when its run failed


@dataclass
class Outcome:
    """How a job's run ended, as the worker records it."""

    phase: int
    message: str = ""
    requeue: bool = False  # give the job back to its queue (drain, preemption)
    checkpoint_first: bool = False  # let the ranks checkpoint before they stop (STOP file)
    lease_lost: bool = False  # another host owns the job now: write nothing
    retry_later: bool = False  # back to its queue after a backoff: a gang that did not form, or lost a node
    infra_failure: bool = False  # with retry_later: a node was lost (counted against the fleet's retry limit)
    checkpoint_within_s: float | None = None  # with checkpoint_first: the time it has (None: the drain grace)


def while_running(proc: subprocess.Popen[bytes]) -> Iterator[float]:
    """The monotonic time, every SUPERVISE_POLL_S while proc runs (a supervisor's loop body runs on each)."""
    while True:
        try:
            proc.wait(timeout=SUPERVISE_POLL_S)
            return
        except subprocess.TimeoutExpired:
            yield time.monotonic()


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def node_log_tail(out: Path, node_rank: int) -> str:
    """The last lines of one node's ranks (or of its launcher, when the ranks never started)."""
    train = node_log_path(out, node_rank)
    return log_tail(train if train.is_file() else launcher_log_path(out, node_rank), LOG_TAIL_LINES)

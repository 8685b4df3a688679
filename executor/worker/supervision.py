"""What the fleet worker's supervision of a training process tree shares, leader and members alike: how a run
ended (Outcome: Finished, Requeue, RetryLater or LeaseLost) and why it was stopped (Stop), the supervision cadence,
and stopping and quoting a tree."""

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


@dataclass(frozen=True)
class Finished:
    """The run ended, DONE, FAILED or CANCELLED: its event is published, a failure's message is the job's error."""

    phase: int
    message: str = ""


@dataclass(frozen=True)
class Requeue:
    """The job goes back to the front of its queue to resume from its last checkpoint, not as a failure: a drain,
    a preemption or reclaim, a quarantined host, an out-of-memory re-plan."""

    message: str


@dataclass(frozen=True)
class RetryLater:
    """The job goes back to its queue after a backoff: a gang that did not form or lost a node, a hung run. An
    `infra_failure` counts against the fleet's retry limit."""

    message: str
    infra_failure: bool = False


@dataclass(frozen=True)
class LeaseLost:
    """Another host owns the job now (or may): this worker writes nothing more of it."""

    message: str


Outcome = Finished | Requeue | RetryLater | LeaseLost  # how a job's run ended, as the worker records it


@dataclass(frozen=True)
class Stop:
    """Why the worker stops a running tree, and how: at once, or letting the ranks checkpoint first (the STOP file)
    within `checkpoint_within_s` (None: the worker's drain grace); `outcome` is then the run's."""

    outcome: Outcome
    checkpoint_first: bool = False
    checkpoint_within_s: float | None = None


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

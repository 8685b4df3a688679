"""How the worker starts a run's process tree: the training launcher (`python -m executor.training`, one per node;
the worker never imports it) in a session of its own, so one signal to the group stops the whole tree, its output
appended to the node's launcher log. The Launcher is injected into WorkerRuntime (executor.worker.main), so a
simulated host (devtools.sim_worker) starts something else without patching the worker."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TRAINING_MODULE = "executor.training"


@dataclass(frozen=True)
class Launch:
    """One start of a run on this node."""

    plan_path: Path
    out: Path
    arguments: list[str]  # the run's flags after the plan and its output (tunefleet train's)
    environment: dict[str, str]  # added to the worker's own
    cwd: Path  # a relative dataset path is relative to it
    log_path: Path  # the launcher's output, appended


Launcher = Callable[[Launch], "subprocess.Popen[bytes]"]


def start_training(launch: Launch) -> subprocess.Popen[bytes]:
    """The training launcher of the training stack's own package (`tunefleet train --supervised`)."""
    command = [sys.executable, "-m", TRAINING_MODULE, str(launch.plan_path), "--output", str(launch.out),
               *launch.arguments]
    launch.log_path.parent.mkdir(parents=True, exist_ok=True)
    with launch.log_path.open("ab") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=launch.cwd,
                                env=dict(os.environ, PYTHONUNBUFFERED="1", **launch.environment))

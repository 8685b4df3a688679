"""`python -m devtools.sim_worker GPUS worker ARGS...`: a real `tunefleet worker` (claim loop, fair share, leases,
events, preemption, the ledger) whose runs are devtools.sim_train instead of DeepSpeed, on a host that says it has
GPUS GPUs of its --gpu-class — the scheduler benchmark's simulated hosts (benchmarks/scheduler.py). The worker takes
the two things that touch hardware or torch as arguments (executor.worker.main): what GPUs the host has, and how a
run starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from executor.worker import main as worker_main
from executor.worker.launching import Launch
from fleet.hosts import HostGpus
from planner.catalog import Catalog

SIM_GPU_MEMORY_BYTES = 80 * 1024**3
ROOT = Path(__file__).resolve().parents[1]  # devtools is not installed: the runs find it here


def start_simulated(launch: Launch) -> subprocess.Popen[bytes]:
    """devtools.sim_train for the plan, where the worker would start the training launcher."""
    launch.log_path.parent.mkdir(parents=True, exist_ok=True)
    with launch.log_path.open("ab") as log:
        return subprocess.Popen([sys.executable, "-m", "devtools.sim_train", str(launch.plan_path), "--output",
                                 str(launch.out)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=launch.cwd, env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                    [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])))


def main() -> int:
    gpus = int(sys.argv[1])
    argv = sys.argv[2:]
    if argv[:1] == ["worker"]:
        argv = argv[1:]

    def detect(_catalog: Catalog) -> HostGpus:
        return HostGpus("sim", gpus, SIM_GPU_MEMORY_BYTES)

    return worker_main.main(argv, detect=detect, launcher=start_simulated)


if __name__ == "__main__":
    raise SystemExit(main())

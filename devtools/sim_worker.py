"""`python -m devtools.sim_worker GPUS worker ARGS...`: a real `tunefleet worker` (claim loop, fair share, leases,
events, preemption, the ledger) whose runs are devtools.sim_train instead of DeepSpeed, on a host that says it has
GPUS GPUs of its --gpu-class — the scheduler benchmark's simulated hosts (benchmarks/scheduler.py). Only the two
functions that touch hardware or torch are replaced: the GPU count NVML would report, and the launch of the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from executor.worker import main as worker_main
from executor.worker.runtime import WorkerRuntime
from fleet.hosts import HostGpus
from launch import command

SIM_GPU_MEMORY_BYTES = 80 * 1024**3
ROOT = Path(__file__).resolve().parents[1]  # devtools is not installed: the runs find it here


def _launch(self: WorkerRuntime, plan_path: Path, out: Path, rendezvous: object = None,
            environment: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    (out / "logs").mkdir(parents=True, exist_ok=True)
    with (out / "logs" / "launcher.log").open("ab") as log:
        return subprocess.Popen([sys.executable, "-m", "devtools.sim_train", str(plan_path), "--output", str(out)],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.work_dir,
                                env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                    [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])))


def main() -> int:
    gpus = int(sys.argv[1])
    worker_main.detect_gpus = lambda catalog: HostGpus("sim", gpus, SIM_GPU_MEMORY_BYTES)  # type: ignore[assignment]
    WorkerRuntime._launch = _launch  # type: ignore[method-assign,assignment]
    return command.main(sys.argv[2:])


if __name__ == "__main__":
    raise SystemExit(main())

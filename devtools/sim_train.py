"""`python -m devtools.sim_train PLAN.json --output DIR ...`: a stand-in for `tunefleet train` in the scheduler
benchmark (benchmarks/scheduler.py) — no torch, no model: it holds its host for the plan's predicted duration ×
$TUNEFLEET_SIM_SCALE, speaking the run's side of the worker's protocol: progress events in DIR/progress.jsonl
(SIM_STEPS training steps, a checkpoint every SIM_CHECKPOINT_EVERY), a resume from its last checkpoint, and the STOP
file of a drain or a preemption (checkpoint at the end of the step, then exit without ending the job). Other
flags (the worker's roots, the progress interval) are accepted and ignored."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from google.protobuf import json_format
from tunefleet.v1 import plan_pb2, progress_pb2

from contract.progress import JsonlProgressSink, read_events
from contract.run_config import stop_path

SCALE_ENV = "TUNEFLEET_SIM_SCALE"
SIM_STEPS = 20
SIM_CHECKPOINT_EVERY = 5
PROGRESS_FILE = "progress.jsonl"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m devtools.sim_train")
    p.add_argument("plan", type=Path)
    p.add_argument("--output", type=Path, required=True)
    args, _ = p.parse_known_args(argv)
    signal.signal(signal.SIGUSR1, lambda *_: sys.exit(0))  # the worker's interrupt after the drain grace
    plan = json_format.Parse(args.plan.read_text(), plan_pb2.Plan())
    duration_s = plan.prediction.estimate.duration_s * float(os.environ.get(SCALE_ENV, "0.001"))
    progress = args.output / PROGRESS_FILE
    done = max([0, *(e.step for e in read_events(progress) if e.checkpoint_path)])  # resume from the checkpoint
    sink = JsonlProgressSink(progress, plan.plan_id)
    step_s = duration_s / SIM_STEPS
    for step in range(done + 1, SIM_STEPS + 1):
        time.sleep(step_s)
        stopping = stop_path(args.output).exists()
        checkpoint = step % SIM_CHECKPOINT_EVERY == 0 or stopping
        sink.emit(progress_pb2.ProgressEvent(
            phase=progress_pb2.PHASE_CHECKPOINTING if checkpoint else progress_pb2.PHASE_TRAINING, step=step,
            total_steps=SIM_STEPS, loss=1.0 / step, checkpoint_path=str(args.output / f"step-{step}") if checkpoint
            else "", eta_s=step_s * (SIM_STEPS - step)))
        if stopping:
            return 0
    sink.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_DONE, step=SIM_STEPS, total_steps=SIM_STEPS,
                                         message="simulated run done"))
    sink.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

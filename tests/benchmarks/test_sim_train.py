"""The scheduler benchmark's simulated run (devtools.sim_train) speaks the run's side of the worker's protocol: it
holds for the predicted duration × the scale, checkpoints, ends DONE; a STOP file makes it checkpoint and exit
without ending the job, and the next run resumes after that checkpoint."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from google.protobuf import json_format
from tunefleet.v1 import plan_pb2, progress_pb2

from contract.progress import read_events
from contract.run_config import stop_path
from devtools.sim_train import SCALE_ENV, SIM_CHECKPOINT_EVERY, SIM_STEPS

ROOT = Path(__file__).resolve().parents[2]


def _run(plan: Path, out: Path) -> int:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{SCALE_ENV: "0.001"})
    return subprocess.run([sys.executable, "-m", "devtools.sim_train", str(plan), "--output", str(out),
                           "--data-root=/ignored"], env=env, timeout=60).returncode


def test_a_simulated_run_checkpoints_stops_on_request_and_resumes_after_its_checkpoint(tmp_path: Path) -> None:
    plan = plan_pb2.Plan(plan_id="sim-1")
    plan.prediction.estimate.duration_s = 1.0  # 1 ms of simulated time at the scale
    plan_path, out = tmp_path / "plan.json", tmp_path / "out"
    plan_path.write_text(json_format.MessageToJson(plan))
    out.mkdir()
    stop_path(out).write_text("preempted")
    assert _run(plan_path, out) == 0
    stopped = read_events(out / "progress.jsonl")
    assert [e.step for e in stopped] == [1] and stopped[-1].checkpoint_path, "it checkpoints its step and stops"
    assert stopped[-1].phase != progress_pb2.PHASE_DONE

    stop_path(out).unlink()
    assert _run(plan_path, out) == 0
    events = read_events(out / "progress.jsonl")
    assert [e.step for e in events[1:]] == [*range(2, SIM_STEPS + 1), SIM_STEPS], "it resumes after its checkpoint"
    assert events[-1].phase == progress_pb2.PHASE_DONE and [e.sequence for e in events] == list(
        range(1, len(events) + 1))
    assert [e.step for e in events if e.checkpoint_path] == [1, *range(SIM_CHECKPOINT_EVERY, SIM_STEPS + 1,
                                                                       SIM_CHECKPOINT_EVERY)]

"""Issue 28, item 1: a run out of memory is re-planned, not failed — through real runs on a CPU host, where the
first step's allocated peak (live tensor bytes) against the plan's capacity stands in for a GPU filling up.

What this exercises: the rank's measurement and report, the worker's re-plan through the planner's memory model
(the cheapest allowed rung predicted to fit), the new plan stored as the job's, the requeue and the run again
to DONE with its global batch unchanged. What only a GPU would: torch.OutOfMemoryError raised mid-step by the
CUDA allocator (the same report, its figures from torch.cuda)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tunefleet.v1 import plan_pb2, progress_pb2

from clients.executor_client import ExecutorClient
from devtools.tiny import make_plan, write_plan
from executor.training.launcher import train
from fleet.recovery import FleetPolicy
from tests.integration.fleet_helpers import assert_once_in_order, events_at_end, fleet_plan

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
MICRO_BATCH = 4
# ZeRO 0: on a model this small, ZeRO 1-2's reduce bucket (allocated whole) would be most of every peak
ZERO_STAGE = 0
_PEAK = re.compile(r"allocated peak [^(]*\((\d+) bytes")


def _first_step_peak(tiny_model: Path, data: Path, tmp_path: Path, micro_batch: int, grad_accum: int) -> int:
    """The allocated peak of a real one-step run at this micro-batch and accumulation, as its PREFLIGHT says."""
    name = f"probe-{micro_batch}x{grad_accum}"
    plan = make_plan(tiny_model, data, tmp_path / name, micro_batch=micro_batch, grad_accum=grad_accum, max_steps=1,
                     zero_stage=ZERO_STAGE, plan_id=name)
    plan.prediction.fit.capacity_bytes = 2 ** 40
    result = train(write_plan(plan, tmp_path / f"{name}.json"), progress_interval_s=0)
    assert result.succeeded, result.last_event.message
    events = [json.loads(line) for line in result.config.progress_path.read_text().splitlines()]
    preflight = next(e["message"] for e in events if e["phase"] == "PHASE_PREFLIGHT")
    return int(_PEAK.search(preflight).group(1))  # type: ignore[union-attr]


def test_a_run_past_its_capacity_is_replanned_down_the_ladder_and_ends_done_with_its_batch(
        start_service, start_worker, tiny_model, counting_data, tmp_path):
    # the capacity: exactly what the bottom rung (micro-batch 1, accumulation 4) measures, so micro-batches 4 and 2
    # do not fit — two rungs down, whether the planner predicts the way in one re-plan or learns it in two
    capacity = _first_step_peak(tiny_model, counting_data, tmp_path, micro_batch=1, grad_accum=MICRO_BATCH)
    service = start_service(policy=FleetPolicy(retry_backoff_s=1.0))
    worker = start_worker("host-a")
    total = 6
    plan = fleet_plan(tiny_model, counting_data, "too-big", micro_batch=MICRO_BATCH, max_steps=total,
                      zero_stage=ZERO_STAGE)
    plan.prediction.fit.capacity_bytes = capacity
    with ExecutorClient(service.address, timeout_s=60) as client:
        client.submit(plan)
        events = events_at_end(client, "too-big")
        job = client.get("too-big")
    replans = [e for e in events if e.phase == progress_pb2.PHASE_QUEUED and "re-planned" in e.message]
    assert replans, [e.message for e in events]
    first = replans[0].message
    assert first.startswith("out of memory at step 1: ") and f"micro-batch {MICRO_BATCH} → " in first, first
    assert "re-planned (1 of at most 3)" in first and "predicted" in first, first
    measured = [int(m) for m in _PEAK.findall(" ".join(e.message for e in events))]
    assert measured == [capacity], "only the run that fits reports its preflight, at the probe's peak"
    assert events[-1].phase == progress_pb2.PHASE_DONE and events[-1].step == total, events[-1].message
    final = job.plan.training
    assert final.micro_batch_size == 1, "micro-batch 4 → 2 → 1: two rungs"
    assert final.micro_batch_size * final.gradient_accumulation_steps == MICRO_BATCH, "the global batch is kept"
    ds = json.loads(job.plan.deepspeed_config_json)
    assert (ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"], ds["train_batch_size"]) == (
        1, MICRO_BATCH, MICRO_BATCH)
    assert (worker.work_dir / "too-big" / "final").is_dir()
    assert not (worker.work_dir / "too-big" / "oom.json").exists(), "the report is taken by the re-plan"
    assert_once_in_order(events)


def test_a_run_that_nothing_allowed_can_fit_fails_saying_what_was_tried(start_service, start_worker, tiny_model,
                                                                        counting_data):
    service = start_service()
    start_worker("host-a")
    plan = fleet_plan(tiny_model, counting_data, "never-fits", micro_batch=2, max_steps=4, zero_stage=ZERO_STAGE)
    plan.prediction.fit.capacity_bytes = 1024  # less than the weights
    plan.on_oom.moves.append(plan_pb2.OOM_MOVE_HALVE_MICRO_BATCH)
    with ExecutorClient(service.address, timeout_s=60) as client:
        client.submit(plan)
        events = events_at_end(client, "never-fits")
    end = events[-1]
    assert end.phase == progress_pb2.PHASE_FAILED, end.message
    assert end.message.startswith("out of memory at step 1: ") and "no change on_oom allows is predicted to fit" \
        in end.message and "micro-batch 1" in end.message, end.message
    assert not any("re-planned" in e.message for e in events)

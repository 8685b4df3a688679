"""What the pages show, from real planner answers: the breakdown bar's segments add up to the per-GPU total in
every regime (resident terms, then backward or the optimizer step), positions stay on the scale, embedded JSON
cannot close its script element, and job rows read as the CLI's tables do."""

from __future__ import annotations

import json

import pytest
from tunefleet.v1 import executor_pb2, hardware_pb2, model_pb2, planner_pb2, progress_pb2, training_pb2

from clients.fleet_render import phase_name
from clients.planner_client import PlannerClient
from dashboard import present

CASES = {  # (model, method, gpu, gpus, zero, micro-batch, sequence length, gradient checkpointing)
    "qlora 8B on a 4090": ("meta-llama/Llama-3.1-8B", training_pb2.METHOD_QLORA, "rtx-4090", 1, 0, 2, 2048, True),
    "full 8B, ZeRO 3 on 8x H100": ("meta-llama/Llama-3.1-8B", training_pb2.METHOD_FULL, "h100-sxm-80gb", 8, 3, 1,
                                   4096, True),
    "full 1B, ZeRO 0, short sequences (the step dominates)": ("meta-llama/Llama-3.2-1B", training_pb2.METHOD_FULL,
                                                              "a100-80gb", 1, 0, 1, 128, True),
    "lora 70B that does not fit": ("meta-llama/Llama-3.1-70B", training_pb2.METHOD_LORA, "rtx-4090", 1, 0, 1, 2048,
                                   False),
    "qlora 70B, ZeRO 3 on 2x A100 40GB (loading is the peak)": ("meta-llama/Llama-2-70b-hf",
                                                                training_pb2.METHOD_QLORA, "a100-40gb", 2, 3, 2,
                                                                2048, True),
}


@pytest.fixture(scope="module")
def planner() -> PlannerClient:
    return PlannerClient()


@pytest.mark.parametrize("case", CASES)
def test_the_breakdown_bar_adds_up_to_the_total_on_a_scale_that_holds_capacity_and_range(planner, case) -> None:
    model, method, gpu, gpus, zero, micro_batch, seq, ckpt = CASES[case]
    fit = planner.fit(planner_pb2.FitRequest(
        model=model_pb2.ModelRef(catalog_name=model), hardware=hardware_pb2.HardwareSpec(gpu=gpu, gpus_per_node=gpus),
        training=training_pb2.TrainingSpec(method=method, zero_stage=zero, micro_batch_size=micro_batch,
                                           sequence_length=seq, gradient_checkpointing=ckpt))).result
    segments, capacity_pct, low_pct, high_pct = present.breakdown(fit)
    assert sum(s.bytes for s in segments) == fit.per_gpu.total_bytes
    assert all(s.bytes > 0 and 0 < s.percent <= 100 for s in segments)
    assert sum(s.percent for s in segments) <= 100 + 1e-9
    assert 0 < capacity_pct <= 100 and 0 <= low_pct <= high_pct <= 100
    assert max(capacity_pct, high_pct) == pytest.approx(100), "the scale is the larger of capacity and the range top"
    names = [s.name for s in segments]
    assert len(names) == len(set(names))
    if "loading" in case:  # the whole 4-bit model on each GPU before DeepSpeed partitions it
        assert names[0] == "loading: the whole model" and segments[0].bytes == fit.per_gpu.loading_bytes > 0
        return
    assert names[0] == "weights"
    if fit.per_gpu.optimizer_step_bytes > fit.per_gpu.activations_bytes + fit.per_gpu.gathered_parameters_bytes:
        assert names[-1] == "optimizer step"


def test_embedded_json_cannot_close_its_script_element() -> None:
    text = present.script_json({"message": "</script><script>alert(1)</script>"})
    assert "<" not in text and json.loads(text)["message"].startswith("</script>")


def test_phase_names_round_trip_and_unknown_ones_are_none() -> None:
    for name in present.PHASES:
        assert phase_name(present.phase_value(name))  # type: ignore[arg-type] == name
    assert present.phase_value("") is None and present.phase_value("exploded") is None


def test_job_rows_show_progress_eta_or_expected_start_and_cost() -> None:
    running = executor_pb2.Job(job_id="j1", phase=progress_pb2.PHASE_TRAINING, queue="tunefleet.a100-80gb.high",
                               gpu_class="a100-80gb", priority=executor_pb2.PRIORITY_HIGH, team="vision",
                               cost_high_usd=12.5, spent_usd=3.25,
                               last_event=progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_TRAINING, step=40,
                                                                     total_steps=100, loss=1.23456,
                                                                     tokens_per_s=2345.6, eta_s=600))
    row = present.job_row(running)
    assert (row.phase, row.gpu_class, row.priority, row.step, row.loss, row.tokens_per_s, row.eta, row.cost) == (
        "training", "a100-80gb", "high", "40/100", "1.2346", "2,346", "10 min", "$3.25 of ≤$12.50")
    queued = executor_pb2.Job(job_id="j2", phase=progress_pb2.PHASE_QUEUED, queue="tunefleet.cpu.normal",
                              gpu_class="cpu")
    assert present.job_row(queued).eta == "-" and present.job_row(queued).step == "-"
    queued.expected_start.GetCurrentTime()
    assert present.job_row(queued).eta == "now"


def test_only_training_events_are_metric_points_and_a_finished_job_shows_no_loss() -> None:
    events = [progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_TRAINING, step=9, loss=2.5),
              progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_CHECKPOINTING, step=10),
              progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_DONE, step=10)]
    assert [present.event_json(e)["metric"] for e in events] == [True, False, False]
    sealed = present.event_json(progress_pb2.ProgressEvent(
        phase=progress_pb2.PHASE_TRAINING, step=12, stored_checkpoint=progress_pb2.StoredCheckpoint(step=10, uri="s3://b/c")))
    assert (sealed["stored_step"], sealed["stored"], sealed["checkpoint"]) == (10, "s3://b/c", ""), \
        "the job page shows the checkpoint sealed in the store apart from those written"
    done = executor_pb2.Job(job_id="j", phase=progress_pb2.PHASE_DONE, last_event=events[-1])
    assert present.job_row(done).loss == "-", "a finished job's loss is no 0.0000"
    running = executor_pb2.Job(job_id="j", phase=progress_pb2.PHASE_TRAINING, last_event=events[0], spent_usd=0.52,
                               open_hold_usd=0.30, cost_high_usd=4.80)
    assert present.job_row(running).loss == "2.5000"
    assert present.job_row(running).cost == "$0.82 of ≤$4.80", "a running job's cost counts its open hold"
    plan = executor_pb2.Job(plan={"prediction": {"estimate": {"duration_s": 90, "duration_s_low": 80,
                                                                 "duration_s_high": 120, "step_time_s": 0.15}}})
    assert not any("0 steps" in w for w in present.plan_words(plan.plan)), "a plan with no step count says none"

"""Issue 25, item 5: calibration from the fleet's own runs (planner.calibration).

Everything here is synthetic and says so: the Feedback figures are made up with a known truth — every run's
allocated peak is 8 % over the plan's allocated prediction (or a spread of known ratios), its allocator slack 10 %,
its step time 1.3x the prediction — so the range, the probability and the scaled estimate have exact expected
values. tests/integration/test_budgets.py runs `tunefleet calibrate` over a real CPU run's Feedback."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from contract.errors import InvalidFieldError
from contract.schema import Hardware, Method, TrainingSpec, Workload
from planner import calibration
from planner import constants as k
from planner.calibration import ClassCalibration, Run, run_of
from planner.catalog import default_catalog
from planner.estimate import calibrated, estimate
from planner.fit import fit

CATALOG = default_catalog()
MODEL = CATALOG.model("meta-llama/Llama-3.1-8B")
T = TrainingSpec(method=Method.LORA, micro_batch_size=2, sequence_length=2048)
A100 = Hardware(gpu=CATALOG.gpu("a100-80gb"), host_memory_bytes=2**40, hourly_usd_per_gpu=2.0)


def _feedback_run(allocated_ratio: float, slack: float = 0.10, step_ratio: float = 1.3) -> Run:
    """A synthetic run: its Feedback as the executor writes it, made from a known truth."""
    predicted_total = 40 * 2**30
    allocated = calibration.predicted_allocated(predicted_total) * allocated_ratio
    return run_of(predicted_total, allocated, allocated * (1 + slack), predicted_step_s=2.0,
                  measured_step_s=2.0 * step_ratio)


def test_a_run_is_read_back_as_the_ratios_it_was_made_from() -> None:
    run = _feedback_run(1.08)
    assert (run.allocated_ratio, run.slack, run.step_time_ratio) == pytest.approx((1.08, 0.10, 1.3))
    cpu = run_of(40 * 2**30, 0, 0, predicted_step_s=0.5, measured_step_s=0.75)
    assert (cpu.allocated_ratio, cpu.slack, cpu.step_time_ratio) == (0.0, 0.0, 1.5), "a CPU run measures no GPU"


def test_the_predicted_allocated_peak_the_feedback_carries_is_the_one_compared() -> None:
    carried = run_of(40 * 2**30, 33 * 2**30, 36 * 2**30, predicted_step_s=2.0, measured_step_s=2.0,
                     predicted_allocated_bytes=30 * 2**30)
    assert (carried.allocated_ratio, carried.slack) == pytest.approx((1.1, 3 / 33))
    older = run_of(40 * 2**30, 33 * 2**30, 36 * 2**30, predicted_step_s=2.0, measured_step_s=2.0)
    assert older.allocated_ratio == pytest.approx(33 * 2**30 / calibration.predicted_allocated(40 * 2**30))
    assert older.allocated_ratio != pytest.approx(carried.allocated_ratio)


def test_five_runs_of_a_class_replace_the_built_in_range_with_theirs() -> None:
    runs = tuple(_feedback_run(r) for r in (1.02, 1.04, 1.06, 1.08, 1.10))
    calibrated_catalog = replace(CATALOG, calibrations={"a100-80gb": ClassCalibration("a100-80gb", runs)})
    plain, mine = fit(MODEL, T, A100, CATALOG), fit(MODEL, T, A100, calibrated_catalog)
    allocated = plain.per_gpu.allocated_bytes
    assert mine.per_gpu == plain.per_gpu, "the prediction itself is the memory model's"
    context = plain.per_gpu.cuda_context_bytes
    low, high = context - k.OUTSIDE_ALLOCATOR_SPREAD_BYTES, context + k.OUTSIDE_ALLOCATOR_SPREAD_BYTES
    assert mine.band.low_bytes == pytest.approx(allocated * 1.02 * 1.10 + low, rel=1e-6)
    assert mine.band.high_bytes == pytest.approx(allocated * 1.10 * 1.10 + high, rel=1e-6)
    assert mine.band.basis.startswith("calibrated on 5 runs of this fleet's a100-80gb: allocated x1.020-1.100")
    assert mine.fit_probability == 1.0 and plain.fit_probability is None

    # a GPU the job only just fits: the runs whose error it would not survive lower the probability
    tight = replace(A100, gpu=replace(A100.gpu, memory_bytes=int(allocated * 1.05 * 1.10 + high)))
    assert fit(MODEL, T, tight, calibrated_catalog).fit_probability == pytest.approx(2 / 5)


def test_fewer_than_five_runs_leave_the_built_in_range_and_the_step_time() -> None:
    few = replace(CATALOG, calibrations={"a100-80gb": ClassCalibration("a100-80gb", tuple(
        _feedback_run(1.5) for _ in range(calibration.MIN_RUNS - 1)))})
    assert fit(MODEL, T, A100, few).band == fit(MODEL, T, A100, CATALOG).band
    e = estimate(MODEL, T, A100, Workload(dataset_tokens=10_000_000))
    assert calibrated(e, few.calibration("a100-80gb")) == e


def test_the_step_time_is_scaled_by_the_classes_measured_ratio() -> None:
    cal = ClassCalibration("a100-80gb", tuple(_feedback_run(1.0, step_ratio=r) for r in (1.2, 1.3, 1.3, 1.4, 9.0)))
    e = estimate(MODEL, T, A100, Workload(dataset_tokens=10_000_000))
    scaled = calibrated(e, cal)
    assert scaled.step.step_s == pytest.approx(e.step.step_s * 1.3), "the median, not the outlier"
    assert scaled.duration_s - k.STARTUP_S == pytest.approx((e.duration_s - k.STARTUP_S) * 1.3)
    assert scaled.cost_usd > e.cost_usd


def test_a_calibration_file_round_trips_and_a_foreign_file_is_refused(tmp_path: Path) -> None:
    calibrations = calibration.calibrate([("a100-80gb", _feedback_run(1.05)), ("l4-24gb", _feedback_run(0.98))])
    path = tmp_path / "calibration.json"
    calibration.save(calibrations, path)
    assert calibration.load(path) == calibrations
    path.write_text('{"classes": {}}')
    with pytest.raises(InvalidFieldError) as e:
        calibration.load(path)
    assert "is not a calibration file 'tunefleet calibrate' wrote" in str(e.value)

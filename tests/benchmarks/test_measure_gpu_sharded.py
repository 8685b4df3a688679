"""How benchmarks/measure_gpu_sharded.py reads a GPU's allocator history and its measured rows."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.measure_gpu_sharded import (
    COLUMNS,
    fill_simulated,
    live_at_peak,
    measured_peaks,
    planned,
    rounding_bytes,
    simulated_bytes,
)
from benchmarks.simulate_rows import table_rows
from contract.schema import Recipe, Sharding
from planner import constants
from planner.catalog import default_catalog
from planner.confidence import allocated_error

LABEL = "hf-trainer Mistral-7B-v0.3 lora[q_proj,k_proj,v_proj,o_proj] mb2x4096 ckpt sdpa fsdp3 x2"


def _event(action: str, addr: int, size: int, where: str = "") -> dict[str, object]:
    return {"action": action, "addr": addr, "size": size,
            "frames": [{"filename": f"/site-packages/{where}.py", "line": 1, "name": "f"}] if where else []}


def test_the_replayed_peak_counts_blocks_from_alloc_to_free_completed_and_frees_of_older_blocks() -> None:
    trace = [_event("alloc", 1, 100, "a"), _event("alloc", 2, 50, "b"),
             _event("free_requested", 1, 100),  # still in use by another stream: still allocated
             _event("alloc", 3, 10, "c"),  # 160: the peak so far, a, b and c live
             _event("free_completed", 1, 100),
             _event("free_completed", 9, 40),  # a block allocated before the history began
             _event("alloc", 4, 120, "d")]  # 20 + 120 = 140: not a new peak
    peak, by_site = live_at_peak(trace)
    assert peak == 160
    assert by_site == {"a.py:1 f": 100, "b.py:1 f": 50, "c.py:1 f": 10}


def test_the_allocator_s_rounding_is_what_active_blocks_hold_beyond_their_requests() -> None:
    snapshot = {"segments": [{"blocks": [
        {"state": "active_allocated", "size": 2 * 2**20, "requested_size": 2**20 + 512},
        {"state": "active_allocated", "size": 1024, "requested_size": 1000},
        {"state": "inactive", "size": 4096, "requested_size": 0}]}]}
    assert rounding_bytes(snapshot) == 2**20 - 512 + 24


def test_rows_measured_without_a_simulated_peak_get_make_bench_simulate_s(tmp_path: Path) -> None:
    path = tmp_path / "gpu_rows_test.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        writer.writerow([LABEL, 0, 2, "GPU", "2.11", 0, 1, 2, 3, 4, "0.5", 0])
    fill_simulated(path)
    (row,) = csv.DictReader(path.open())
    assert int(row["simulated_bytes"]) == simulated_bytes(LABEL, 0) > 0
    assert row["max_allocated_bytes"] == "2"


def test_a_model_cut_to_fewer_layers_is_planned_with_fewer_layers() -> None:
    (four, _), (eight, _), (every, likely) = planned(LABEL, 4), planned(LABEL, 8), planned(LABEL, 0)
    assert 0 < four.allocated_bytes < eight.allocated_bytes < every.allocated_bytes
    assert likely.low_bytes < every.total_bytes < likely.high_bytes


def test_fit_s_allocated_range_reaches_as_far_above_the_plan_as_our_gpu_runs_measured() -> None:
    """MEASURED_GPU_ALLOCATED_UNDER is the worst of the committed GPU rows, recomputed from them."""
    above = [int(r["max_allocated_bytes"]) / planned(label, layers)[0].allocated_bytes - 1
             for (label, layers), r in measured_peaks().items()]
    assert len(above) >= 10
    assert pytest.approx(max(above), abs=0.0005) == constants.MEASURED_GPU_ALLOCATED_UNDER, \
        f"the GPU rows now measure {max(above):+.2%} above the plan: update MEASURED_GPU_ALLOCATED_UNDER"


def test_a_regime_whose_simulated_error_is_smaller_gets_the_measured_one_and_says_so() -> None:
    (row,) = [r for r in table_rows() if r.label == LABEL]
    plain = replace(row.training, sharding=Sharding.DEEPSPEED, zero_stage=0, recipe=Recipe.TUNEFLEET)
    architecture = default_catalog().model(row.model).architecture
    (under, _), basis = allocated_error(architecture, plain)
    assert under == max(constants.SIMULATED_ERROR_ZERO0_TO_2[0], constants.MEASURED_GPU_ALLOCATED_UNDER)
    assert "measured on our GPU runs" in basis
    (under3, _), _ = allocated_error(architecture, replace(plain, zero_stage=3))
    assert under3 == max(constants.SIMULATED_ERROR_ZERO3[0], constants.MEASURED_GPU_ALLOCATED_UNDER)


def test_a_row_the_harness_cannot_run_is_refused_with_where_to_measure_it() -> None:
    with pytest.raises(SystemExit, match="measure_gpu.py"):
        planned("Llama-3.1-8B lora[q_proj,v_proj] mb1x2048 ckpt sdpa z0 x1", 0)
    with pytest.raises(SystemExit, match="no make bench-simulate row"):
        planned("no such row", 0)

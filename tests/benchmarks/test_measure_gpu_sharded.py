"""How benchmarks/measure_gpu_sharded.py reads a GPU's allocator history and its measured rows."""

from __future__ import annotations

import csv
from pathlib import Path

from benchmarks.measure_gpu_sharded import (
    COLUMNS,
    fill_simulated,
    live_at_peak,
    planned,
    rounding_bytes,
    simulated_bytes,
)

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

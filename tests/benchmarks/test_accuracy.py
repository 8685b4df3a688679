"""How bench-accuracy reads the third-party rows (benchmarks/accuracy.py): the same rules for every row."""

from __future__ import annotations

import csv

import pytest

from benchmarks.accuracy import PUBLIC, interpret, predicted_bytes, public_cases
from contract.schema import Method, Sharding
from planner import constants
from planner.catalog import default_catalog
from planner.confidence import band
from planner.memory import per_gpu_memory

ROWS = list(csv.DictReader(PUBLIC.open()))
CATALOG = default_catalog()


def _row(model: str, seq_len: str, method: str = "lora") -> tuple[int, dict[str, str]]:
    return next((i, r) for i, r in enumerate(ROWS)
                if r["model"] == model and r["seq_len"].startswith(seq_len) and r["method"] == method)


def test_qwen_s_c_proj_adapts_both_layers_of_that_name() -> None:
    """Qwen (v1) calls its attention's output projection and its MLP's down projection both c_proj, and PEFT's suffix
    match puts an adapter on each."""
    index, row = _row("Qwen-7B", "2048")
    targets = interpret(index, row, CATALOG).training.lora.target_modules
    assert {"o_proj", "down_proj", "q_proj", "k_proj", "v_proj", "up_proj", "gate_proj"} == set(targets)


def test_seconds_per_step_with_accumulation_read_as_tokens_per_second() -> None:
    index, row = _row("Qwen-7B", "2048")
    assert "5.2 s/it" in row["notes"] and "grad-accum 8" in row["notes"] and not row["measured_tokens_per_s"]
    assert interpret(index, row, CATALOG).measured_tokens_per_s == pytest.approx(1 * 8 * 2048 / 5.2)


def test_a_row_s_own_tokens_per_second_is_taken_as_it_is_and_a_row_without_speed_has_none() -> None:
    measured = next((i, r) for i, r in enumerate(ROWS) if r["measured_tokens_per_s"] and r["measured_peak_gib_per_gpu"])
    assert interpret(*measured, CATALOG).measured_tokens_per_s == float(measured[1]["measured_tokens_per_s"])
    silent = next((i, r) for i, r in enumerate(ROWS) if r["measured_peak_gib_per_gpu"] and r["layers"]
                  and not r["measured_tokens_per_s"] and "s/it" not in r["notes"])
    assert interpret(*silent, CATALOG).measured_tokens_per_s == 0.0


def test_fit_s_range_for_fsdp_qlora_reaches_as_far_above_the_plan_as_measured_runs_were() -> None:
    """The third-party FSDP QLoRA rows that report torch's peak allocated bytes were found above the plan by more
    than the simulation's band; planner.constants holds the worst of them, and Fit's range reaches that far."""
    cases = [c for c in public_cases(CATALOG)[0] if c.training.method is Method.QLORA and c.measured_allocated_bytes]
    fsdp = [c for c in cases if c.training.sharding is Sharding.FSDP]
    assert len(fsdp) >= 2
    above = [c.measured_allocated_bytes / predicted_bytes(c, "allocated") - 1 for c in fsdp]
    assert pytest.approx(max(above), abs=0.0005) == constants.MEASURED_FSDP_QLORA_UNDER, \
        f"the rows now measure {max(above):+.1%} above the plan: update MEASURED_FSDP_QLORA_UNDER"
    for c in cases:
        m = per_gpu_memory(c.model, c.training, c.hardware)
        likely = band(m, c.model.architecture, c.training)
        if c in fsdp:
            assert likely.high_bytes >= c.measured_allocated_bytes + m.allocator_bytes, c.label
        assert ("measured FSDP QLoRA runs" in likely.basis) == (c in fsdp), c.label
    assert len(cases) > len(fsdp), "a QLoRA row without FSDP keeps the simulated band"

"""A Trainer's step on transformers 4.45.2 (benchmarks/legacy_trainer.py, in .venv-legacy) at full size: what that
release's checkpointing keeps, and the planner's terms for it (planner.recipes.checkpoints_outside_fsdp_units)."""

from __future__ import annotations

import csv

import pytest

from benchmarks.simulate_rows import LEGACY_TRANSFORMERS, RESULTS_CSV, table_rows
from benchmarks.venvs import LEGACY, VenvError, in_venv

STORED = {r["row"]: r for r in csv.DictReader(RESULTS_CSV.open())}
MISTRAL_QLORA = next(row for row in table_rows() if row.training.transformers_version
                     and row.model == "mistralai/Mistral-7B-v0.3" and row.training.method.value == "qlora")


def test_mistral_s_fsdp_qlora_on_4_45_holds_every_other_layer_s_input_gradient() -> None:
    """fms-acceleration's Mistral-7B QLoRA on two ranks: the step peaks in the first layer's backward, above today's
    release's peak (its loss) by most of the 31 held hidden-sized gradients (64 MiB each), and the planner is within
    make bench-simulate's goal; the bytes are the ones make bench-simulate stored (the step is deterministic)."""
    run = in_venv(LEGACY, "benchmarks.legacy_trainer", "--row", MISTRAL_QLORA.label)
    assert run["transformers"] == LEGACY_TRANSFORMERS
    assert run["peak_at"].startswith("backward:")
    stored = STORED[MISTRAL_QLORA.label]
    assert run["simulated_bytes"] == int(stored["simulated_bytes"])
    assert -0.02 <= float(stored["error"]) <= 0.03, stored
    today = STORED[MISTRAL_QLORA.label.replace(f"transformers-{LEGACY_TRANSFORMERS} ", "")]
    t = MISTRAL_QLORA.training
    held = 31 * 4096 * t.micro_batch_size * t.sequence_length * 2
    assert run["simulated_bytes"] - int(today["simulated_bytes"]) > held // 2
    # two steps, the second holding the AdamW states the first made
    assert len(run["steps"]) == 2 and run["steps"][1] > run["steps"][0]


def test_a_row_that_is_not_in_the_table_is_refused_by_name() -> None:
    with pytest.raises(VenvError, match="no make bench-simulate row is labelled"):
        in_venv(LEGACY, "benchmarks.legacy_trainer", "--row", "hf-trainer Mistral-7B-v0.3 nothing")

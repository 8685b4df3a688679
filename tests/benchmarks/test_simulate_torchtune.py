"""torchtune's single-device recipes run by the recipe itself (benchmarks/torchtune_recipe.py, in .venv-torchtune)
peak at the same bytes on fake tensors as on real ones, and the planner's torchtune terms hold at full size."""

from __future__ import annotations

import json

import pytest

from benchmarks.torchtune_recipe import in_torchtune_venv
from contract.schema import ALL_LINEAR, LoraSpec, Method, Precision, Recipe, TrainingSpec
from tests.benchmarks.tiny import TINY_LLAMA

# LoRA with checkpointing (the recipe's per-layer checkpoint wrapper) and a full fine-tune without (the chunked
# output projection's weight gradients summed chunk by chunk)
CASES = [(Method.LORA, "ckpt"), (Method.FULL, "no-ckpt")]


@pytest.mark.parametrize(("method", "ckpt"), CASES, ids=[f"{m.value}-{c}" for m, c in CASES])
def test_a_fake_torchtune_step_peaks_at_the_same_bytes_as_the_real_step(method: Method, ckpt: str) -> None:
    run = in_torchtune_venv("benchmarks.torchtune_probe", "steps", json.dumps(TINY_LLAMA), method.value, ckpt)
    assert run["fake"] == run["real"]
    # the recipe's own loop ran two optimizer steps, the second holding the AdamW states the first made
    steps = run["fake"]["step_peak_bytes"]
    assert len(steps) == 2 and steps[1] > steps[0]


def test_the_planner_holds_to_torchtune_s_step_at_full_size() -> None:
    """Llama-3.2-1B LoRA at 2 x 2,048 tokens: the recipe's peak is its chunked loss (every chunk's fp32 log-softmax
    kept for backward), which the planner counts within 1 %."""
    t = TrainingSpec(method=Method.LORA, micro_batch_size=2, sequence_length=2048, recipe=Recipe.TORCHTUNE,
                     precision=Precision.BF16_PURE, lora=LoraSpec(target_modules=(ALL_LINEAR,), dropout=0.0))
    from benchmarks.simulate_rows import Row

    result = in_torchtune_venv("benchmarks.simulate", "--row", Row("meta-llama/Llama-3.2-1B", t).label)
    assert result["peak_at"] == "forward:nll_loss_forward"
    assert abs(result["error"]) <= 0.01, result

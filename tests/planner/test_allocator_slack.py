"""The caching allocator's slack follows the step's short-lived blocks, not the model's size: what the allocator
replayed on simulated steps shows (make bench-simulate), and what Fit's range is built on."""

from __future__ import annotations

from dataclasses import replace

import pytest

from contract.schema import ALL_LINEAR, Hardware, LoraSpec, Method, Recipe, TrainingSpec
from planner import constants as k
from planner import recipes
from planner.catalog import default_catalog
from planner.fit import fit
from planner.memory import per_gpu_memory
from planner.parameters import parameter_split
from planner.transient_blocks import transient_block_bytes

CATALOG = default_catalog()
H100 = Hardware(gpu=CATALOG.gpu("h100-sxm-80gb"), host_memory_bytes=2**40)
LORA = TrainingSpec(method=Method.LORA, micro_batch_size=1, sequence_length=2048, gradient_checkpointing=True,
                    lora=LoraSpec(target_modules=(ALL_LINEAR,)))


def _slack(model: str, t: TrainingSpec) -> int:
    return per_gpu_memory(CATALOG.model(model), t, H100).allocator_bytes


def test_a_model_nine_times_larger_does_not_get_nine_times_the_slack() -> None:
    small, large = (per_gpu_memory(CATALOG.model(m), LORA, H100) for m in ("meta-llama/Llama-3.1-8B",
                                                                          "meta-llama/Llama-3.1-70B"))
    assert large.weights_bytes > 8 * small.weights_bytes
    # the same vocabulary and tokens: one loss block alike, a wider layer
    assert small.allocator_bytes < large.allocator_bytes < 2 * small.allocator_bytes


def test_the_slack_grows_with_the_tokens_of_a_micro_batch() -> None:
    short, long = (_slack("meta-llama/Llama-3.1-8B", replace(LORA, sequence_length=n)) for n in (2048, 8192))
    assert long > 3.5 * short


def test_a_full_fine_tune_adds_the_slack_of_its_gradients_and_optimizer_step() -> None:
    full = replace(LORA, method=Method.FULL, zero_stage=2)
    b = per_gpu_memory(CATALOG.model("meta-llama/Llama-3.1-8B"), full, replace(H100, gpus_per_node=4))
    adapters = per_gpu_memory(CATALOG.model("meta-llama/Llama-3.1-8B"), replace(LORA, zero_stage=2),
                              replace(H100, gpus_per_node=4))
    extra = k.SLACK_PER_STEP_BYTE * b.optimizer_step_bytes + k.SLACK_PER_GRADIENT_BYTE * b.gradients_bytes
    assert extra > 0
    assert b.allocator_bytes >= int(extra)
    assert b.allocator_bytes > 2 * adapters.allocator_bytes


def test_hf_trainer_qlora_s_fp32_stream_leaves_more_slack_than_the_executor_s() -> None:
    qlora = replace(LORA, method=Method.QLORA)
    trainer_qlora = replace(qlora, recipe=Recipe.HF_TRAINER)
    executor, trainer = (_slack("mistralai/Mistral-7B-v0.3", t) for t in (qlora, trainer_qlora))
    a = CATALOG.model("mistralai/Mistral-7B-v0.3").architecture
    split = parameter_split(a, qlora.method, qlora.lora, False, 0)
    ours, theirs = (transient_block_bytes(a, recipes.activation_spec(t), split) for t in (qlora, trainer_qlora))
    # the recomputed layer's tensors in fp32, its dequantised weights alike
    assert theirs[1] > 1.5 * ours[1] and theirs[2] == ours[2] > 0
    # the same loss block and dequantised weights: the layer's difference is the slack's (to the byte, rounded)
    assert theirs[0] == ours[0]
    assert trainer - executor == pytest.approx(k.SLACK_PER_LAYER_BYTE * (theirs[1] - ours[1]), abs=1)


def test_fit_s_range_holds_the_total_and_names_the_replayed_allocator() -> None:
    r = fit(CATALOG.model("meta-llama/Llama-3.1-8B"), LORA, H100, CATALOG)
    assert r.band.low_bytes < r.per_gpu.total_bytes < r.band.high_bytes
    assert "allocator replayed on the simulated step" in r.band.basis
    under, over = k.SLACK_MODEL_ERROR
    reserved = r.per_gpu.allocated_bytes + r.per_gpu.allocator_bytes
    assert r.band.high_bytes >= reserved * (1 + under)
    assert r.band.low_bytes <= reserved * (1 - over) + r.per_gpu.cuda_context_bytes - k.OUTSIDE_ALLOCATOR_SPREAD_BYTES

"""Loading a quantised model (planner.loading): transformers places it whole on every GPU before DeepSpeed's ZeRO-3
partitions it, so more GPUs lower a step's peak but not loading's; and ZeRO-3 partitions and gathers its 4-bit
weights as their packed storage (planner.regimes.zero3_elements)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from contract.schema import Attention, Hardware, LoraSpec, Method, Precision, Recipe, Sharding, TrainingSpec
from planner import constants as k
from planner.catalog import default_catalog
from planner.fit import fit
from planner.loading import largest_unquantised_params, loading_bytes
from planner.memory import gpu_memory
from planner.parameters import parameter_split, weight_storage_bytes
from planner.regimes import zero3_elements

CATALOG = default_catalog()
LLAMA_70B = CATALOG.model("meta-llama/Llama-2-70b-hf")
# PEFT's ZeRO-3 QLoRA guide: LoRA r8 on every linear, 2 x 2,048 tokens, checkpointed
QLORA_Z3 = TrainingSpec(method=Method.QLORA, micro_batch_size=2, sequence_length=2048, zero_stage=3,
                        gradient_checkpointing=True, attention=Attention.FLASH,
                        lora=LoraSpec(rank=8, alpha=16, target_modules=("all-linear",)))


def _split(a, t):  # type: ignore[no-untyped-def]
    return parameter_split(a, t.method, t.lora, t.train_vision_tower, t.freeze_trainable_layers)


def test_a_trainer_script_loads_the_whole_model_upcast_with_adapters_and_one_cast_copy() -> None:
    a = LLAMA_70B.architecture
    t = replace(QLORA_Z3, recipe=Recipe.HF_TRAINER)
    split = _split(a, t)
    dense = split.total - split.quantised
    expected = weight_storage_bytes(split, t) + 2 * dense + 4 * split.adapter + 2 * a.vocab_size * a.hidden_size
    assert loading_bytes(a, split, t) == int(expected)
    # untied Llama: the embedding and the output head are the largest dense parameters, the same size
    assert largest_unquantised_params(a) == a.vocab_size * a.hidden_size


@pytest.mark.parametrize("recipe", [Recipe.TUNEFLEET, Recipe.TRL_SFT])
def test_the_executor_and_trl_load_the_model_as_stored_with_the_adapters(recipe: Recipe) -> None:
    """Neither upcasts (the executor under mixed precision: DeepSpeed would cast it back); PEFT makes the adapters in
    fp32 before TRL casts QLoRA's to bf16."""
    a = LLAMA_70B.architecture
    t = replace(QLORA_Z3, recipe=recipe)
    split = _split(a, t)
    assert loading_bytes(a, split, t) == int(weight_storage_bytes(split, t)) + 4 * split.adapter


def test_the_executor_loads_a_mixture_of_experts_without_upcasting_its_dense_expert_tensors() -> None:
    """bitsandbytes leaves fused expert tensors dense; k-bit preparation would upcast them to fp32, more than LoRA's
    bf16 model. The executor prepares only an fp32 step (executor.training.model.prepare_model)."""
    a = CATALOG.model("Qwen/Qwen3-30B-A3B").architecture
    t = replace(QLORA_Z3, zero_stage=2)
    lora = gpu_memory(a, replace(t, method=Method.LORA), 2)
    assert 0 < gpu_memory(a, t, 2).loading_bytes < lora.weights_bytes
    assert not t.upcasts_when_loading and replace(t, precision=Precision.FP32).upcasts_when_loading
    assert replace(t, recipe=Recipe.HF_TRAINER).upcasts_when_loading


def test_more_gpus_lower_a_step_but_not_loading() -> None:
    a = LLAMA_70B.architecture
    two, eight = gpu_memory(a, QLORA_Z3, 2), gpu_memory(a, QLORA_Z3, 8)
    assert two.loading_bytes == eight.loading_bytes > 0
    assert eight.weights_bytes < two.weights_bytes
    assert eight.loading_decides_peak and two.loading_decides_peak
    assert eight.allocated_bytes == eight.loading_bytes + eight.cuda_workspace_bytes
    assert eight.total_bytes == eight.allocated_bytes + eight.cuda_context_bytes
    assert not eight.activations_decide_peak


def test_a_step_above_loading_keeps_its_own_peak_and_slack() -> None:
    a = CATALOG.model("meta-llama/Llama-3.1-8B").architecture
    long = replace(QLORA_Z3, micro_batch_size=8, sequence_length=8192, attention=Attention.SDPA)
    b = gpu_memory(a, long, 2)
    assert 0 < b.loading_bytes < b.allocated_bytes and not b.loading_decides_peak
    assert b.total_bytes == b.allocated_bytes + b.cuda_context_bytes + b.allocator_bytes


@pytest.mark.parametrize("t", [replace(QLORA_Z3, method=Method.LORA), replace(QLORA_Z3, recipe=Recipe.HF_TRAINER,
                                                                               sharding=Sharding.FSDP)])
def test_no_loading_term_for_a_dense_model_or_under_fsdp(t: TrainingSpec) -> None:
    assert gpu_memory(LLAMA_70B.architecture, t, 2).loading_bytes == 0


def test_zero3_counts_4_bit_weights_as_their_packed_bf16_elements() -> None:
    a = CATALOG.model("meta-llama/Llama-3.2-1B").architecture
    split = _split(a, QLORA_Z3)
    elements, largest = zero3_elements(a, split, QLORA_Z3)
    # simulated (make bench-simulate): 243,269,632 packed elements for Llama-3.2-1B's 973,078,528 4-bit weights
    assert split.quantised == 973_078_528
    assert elements - (split.total - split.quantised) == 243_269_632
    assert largest == a.vocab_size * a.hidden_size  # the tied embedding outweighs a packed layer
    lora = zero3_elements(a, _split(a, replace(QLORA_Z3, method=Method.LORA)), replace(QLORA_Z3, method=Method.LORA))
    assert lora[0] == split.total


def test_quantisation_constants_are_held_whole_by_every_rank() -> None:
    a = LLAMA_70B.architecture
    split = _split(a, QLORA_Z3)
    two, four = gpu_memory(a, QLORA_Z3, 2), gpu_memory(a, QLORA_Z3, 4)
    per_weight = 1 / k.NF4_BLOCK_SIZE + 4 / (k.NF4_BLOCK_SIZE * k.NF4_DOUBLE_QUANT_BLOCK)
    constants = split.quantised * per_weight
    assert two.weights_bytes - 2 * four.weights_bytes == pytest.approx(-constants, abs=2)


def test_fit_says_loading_decides_and_that_more_gpus_do_not_help() -> None:
    hw = Hardware(gpu=CATALOG.gpu("l4"), gpus_per_node=8)
    r = fit(LLAMA_70B, QLORA_Z3, hw, CATALOG)
    assert not r.fits
    assert any(n.startswith("loading is the peak") and "more GPUs do not lower it" in n for n in r.notes)
    assert any(n.startswith("loading needs") for n in r.notes)
    assert r.band.low_bytes < r.per_gpu.total_bytes < r.band.high_bytes
    # the suggestion it makes is a bigger GPU, which holds the whole model
    assert r.suggestions and all(s.hardware.gpu.memory_bytes > r.per_gpu.loading_bytes for s in r.suggestions if s.fits)

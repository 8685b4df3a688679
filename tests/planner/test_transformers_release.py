"""training.transformers_version: what a Trainer's script on an older transformers allocates differently
(planner.recipes.checkpoints_outside_fsdp_units, repeats_kv), how the field is checked, carried and reported."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.simulate_rows import LEGACY_TRANSFORMERS, table_rows
from contract.errors import InvalidFieldError
from contract.schema import Attention, Hardware, LoraSpec, Method, Recipe, Sharding, TrainingSpec
from contract.training import training_from_proto, training_to_proto
from planner import constants
from planner.catalog import default_catalog
from planner.fit import fit
from planner.memory import gpu_memory

CATALOG = default_catalog()
MISTRAL = CATALOG.model("mistralai/Mistral-7B-v0.3").architecture
# fms-acceleration's configuration: LoRA r16 on q, k, v, o, FSDP on two ranks, 2 x 4,096 tokens, checkpointed
FSDP_QLORA = TrainingSpec(method=Method.QLORA, micro_batch_size=2, sequence_length=4096, zero_stage=3,
                          recipe=Recipe.HF_TRAINER, sharding=Sharding.FSDP,
                          lora=LoraSpec(rank=16, target_modules=("q_proj", "k_proj", "v_proj", "o_proj")))


def _activations(t: TrainingSpec, ranks: int = 2) -> int:
    return gpu_memory(MISTRAL, t, ranks).activations_bytes


def test_before_4_52_a_checkpointed_fsdp_step_holds_every_other_layer_s_input_gradient() -> None:
    """At the first layer's backward the held gradients (one hidden-sized bf16 tensor per other layer) lift the
    layer's peak above the loss's, and that layer's backward runs beside its own unit only: no prefetched one."""
    today = gpu_memory(MISTRAL, FSDP_QLORA, 2)
    flash = replace(FSDP_QLORA, attention=Attention.FLASH)  # no repeated k and v: the held gradients alone
    old = gpu_memory(MISTRAL, replace(flash, transformers_version="4.51.3"), 2)
    tokens = FSDP_QLORA.micro_batch_size * FSDP_QLORA.sequence_length
    held = (MISTRAL.num_layers - 1) * MISTRAL.hidden_size * tokens * 2
    assert old.activations_bytes > gpu_memory(MISTRAL, flash, 2).activations_bytes
    assert old.allocated_bytes - today.allocated_bytes < held  # the loss's peak was the higher one today
    assert old.allocated_bytes - today.allocated_bytes > held * 0.5
    assert gpu_memory(MISTRAL, replace(flash, transformers_version="4.52.0"), 2) == gpu_memory(MISTRAL, flash, 2)


def test_only_frozen_units_under_checkpointing_hold_them() -> None:
    old = replace(FSDP_QLORA, attention=Attention.FLASH, transformers_version="4.45.2")
    for unaffected in (replace(old, gradient_checkpointing=False), replace(old, method=Method.FULL, lora=LoraSpec())):
        assert _activations(unaffected) == _activations(replace(unaffected, transformers_version=""))


def test_before_4_54_sdpa_saves_k_and_v_repeated_to_every_head() -> None:
    """Mistral's 8 key-value heads for 32 query heads: SDPA saves k and v copied to all 32 (4.53), as given (4.54);
    flash attention takes them as given on every release."""
    one_gpu = replace(FSDP_QLORA, zero_stage=0, sharding=Sharding.DEEPSPEED, method=Method.LORA,
                      gradient_checkpointing=False)
    tokens = one_gpu.micro_batch_size * one_gpu.sequence_length
    repeated = 2 * (MISTRAL.q_dim - MISTRAL.kv_dim) * tokens * 2
    more = _activations(replace(one_gpu, transformers_version="4.53.3"), 1) - _activations(one_gpu, 1)
    assert more == MISTRAL.num_layers * repeated  # every layer's saved tensors kept
    assert _activations(replace(one_gpu, transformers_version="4.54.0"), 1) == _activations(one_gpu, 1)
    flash = replace(one_gpu, attention=Attention.FLASH)
    assert _activations(replace(flash, transformers_version="4.45.2"), 1) == _activations(flash, 1)


def test_the_simulated_rows_name_the_release_of_the_legacy_virtualenv() -> None:
    legacy = [row for row in table_rows() if row.training.transformers_version]
    assert len(legacy) >= 3
    assert {row.training.transformers_version for row in legacy} == {LEGACY_TRANSFORMERS}
    assert all(f"transformers-{LEGACY_TRANSFORMERS} " in row.label for row in legacy)
    assert constants.TRANSFORMERS_CHECKPOINTS_INSIDE_FSDP > (4, 45) and \
        constants.TRANSFORMERS_SDPA_UNREPEATED_KV > constants.TRANSFORMERS_CHECKPOINTS_INSIDE_FSDP


@pytest.mark.parametrize("version", ["4.45", "4.45.2", "4.52.0rc1", "5.0.0.dev0", "10.1.0"])
def test_a_release_as_pip_names_it_is_taken(version: str) -> None:
    t = replace(FSDP_QLORA, transformers_version=version)
    assert t.transformers_release == tuple(int(x) for x in version.split(".")[:2])
    assert training_from_proto(training_to_proto(t), 2).transformers_version == version


@pytest.mark.parametrize("version", ["four", "4", "v4.45.2", "4.45.2 ", "4.45.2; rm -rf /", "4." * 300])
def test_anything_else_names_the_field(version: str) -> None:
    with pytest.raises(InvalidFieldError, match="training.transformers_version") as refused:
        replace(FSDP_QLORA, transformers_version=version)
    assert "4.45.2" in str(refused.value)


def test_it_belongs_to_a_trainer_recipe() -> None:
    with pytest.raises(InvalidFieldError, match="training.transformers_version"):
        TrainingSpec(transformers_version="4.45.2")
    for recipe in (Recipe.HF_TRAINER, Recipe.TRL_SFT, Recipe.TRL_DPO):
        assert TrainingSpec(recipe=recipe, transformers_version="4.45.2").transformers_release == (4, 45)


def test_fit_says_what_it_counted_for_the_release() -> None:
    hardware = Hardware(gpu=CATALOG.gpu("a100-80gb"), gpus_per_node=2)
    model = CATALOG.model("mistralai/Mistral-7B-v0.3")
    old = fit(model, replace(FSDP_QLORA, transformers_version="4.45.2"), hardware, CATALOG)
    note = next(n for n in old.notes if n.startswith("transformers 4.45.2"))
    assert "FSDP unit" in note and "k and v" in note
    recent = fit(model, replace(FSDP_QLORA, transformers_version="4.57.1"), hardware, CATALOG)
    assert "nothing that release allocates differently" in next(n for n in recent.notes if "4.57.1" in n)
    assert old.per_gpu.total_bytes > recent.per_gpu.total_bytes

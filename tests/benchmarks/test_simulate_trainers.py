"""The Trainer recipes' simulation (benchmarks/recipes.py) is exact: transformers' Trainer, TRL's SFTTrainer and
DPOTrainer, each the library's own step, peak at the same bytes on fake tensors as on real ones, with and without
DeepSpeed; and what the fused head saves the planner follows. A file of its own, so the suite's workers share the
simulation tests."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

os.environ.setdefault("DS_ACCELERATOR", "cpu")

from benchmarks.simulate import simulate  # noqa: E402
from contract.schema import DpoSpec, Method, Objective, Recipe, TrainingSpec  # noqa: E402
from planner.hf_config import architecture_from_config  # noqa: E402
from planner.memory import gpu_memory  # noqa: E402
from tests.benchmarks.tiny import ALL, TINY_LLAMA, fake_equals_real  # noqa: E402

# The Trainer recipes, the library's own step on real tensors and fake: transformers' Trainer + PEFT (hf-trainer),
# autocast and all; TRL's SFTTrainer (trl-sft), its fused LM head and collator (which passes position ids: the
# packed-sequence check reads them), over a sequence long enough for the activations, not the weights, to make the peak
TRAINERS = [(recipe, method, seq) for recipe, seq in ((Recipe.HF_TRAINER, 32), (Recipe.TRL_SFT, 256))
            for method in (Method.LORA, Method.QLORA)]


@pytest.mark.parametrize(("recipe", "method", "seq"), TRAINERS, ids=[f"{r.value}-{m.value}" for r, m, _ in TRAINERS])
def test_a_fake_trainer_step_peaks_at_the_same_bytes_as_the_real_step(recipe: Recipe, method: Method, seq: int) -> None:
    t = TrainingSpec(method=method, micro_batch_size=2, sequence_length=seq, lora=ALL, recipe=recipe)
    fake = fake_equals_real(t)
    assert fake.by_phase["init"] < fake.peak_bytes


# TRL's DPOTrainer, its own step: chosen and rejected through the fused head, the reference the base with the adapter
# off, a frozen copy (full) or precomputed before the first step
TRL_DPO = [(Method.LORA, False), (Method.QLORA, False), (Method.FULL, False), (Method.LORA, True)]


@pytest.mark.parametrize(("method", "precompute"), TRL_DPO,
                         ids=[f"{m.value}{'-precomputed' if p else ''}" for m, p in TRL_DPO])
def test_a_fake_trl_dpo_step_peaks_at_the_same_bytes_as_the_real_step(method: Method, precompute: bool) -> None:
    t = TrainingSpec(method=method, micro_batch_size=2, sequence_length=256, lora=ALL, recipe=Recipe.TRL_DPO,
                     objective=Objective.DPO, dpo=DpoSpec(precompute_reference=precompute))
    fake = fake_equals_real(t)
    assert fake.by_phase["init"] < fake.peak_bytes


# The Trainer recipes under DeepSpeed on two fake ranks, with LLaMA-Factory's ZeRO 2 and 3 configs: the weights
# partitioned as ZeRO-3 loads them, the trainer's torch AdamW stepped by DeepSpeed's ZeRO optimizer
TRAINER_DEEPSPEED = [(recipe, method, zero) for recipe in (Recipe.HF_TRAINER, Recipe.TRL_SFT)
                     for method in (Method.LORA, Method.FULL) for zero in (2, 3)]


@pytest.mark.parametrize(("recipe", "method", "zero"), TRAINER_DEEPSPEED,
                         ids=[f"{r.value}-{m.value}-zero{z}" for r, m, z in TRAINER_DEEPSPEED])
def test_a_fake_trainer_step_under_deepspeed_peaks_at_the_same_bytes_as_the_real_step(recipe: Recipe, method: Method,
                                                                                     zero: int) -> None:
    t = TrainingSpec(method=method, micro_batch_size=2, sequence_length=32, lora=ALL, zero_stage=zero, recipe=recipe)
    fake_equals_real(t, 2)


@pytest.mark.parametrize("method", [Method.LORA, Method.FULL], ids=lambda m: m.value)
def test_a_fake_trl_dpo_step_under_zero_2_peaks_at_the_same_bytes_as_the_real_step(method: Method) -> None:
    """DPOTrainer under the Trainer's ZeRO-2 on two fake ranks: the adapter-off reference, or the frozen copy that
    TRL's prepare_deepspeed holds whole."""
    t = TrainingSpec(method=method, micro_batch_size=2, sequence_length=32, lora=ALL, zero_stage=2,
                     recipe=Recipe.TRL_DPO, objective=Objective.DPO)
    fake_equals_real(t, 2)


def test_trl_sft_never_builds_the_logits_the_trainer_builds() -> None:
    """The fused head scores the vocabulary one bf16 tile of 32,768 columns at a time: with a vocabulary that wide,
    SFTTrainer's step peaks below transformers' Trainer's on the same job by at least the fp32 log-probabilities it
    never saves, and the planner's prediction for each is within 3 % of its simulated peak."""
    vocab, tokens = 32768, 2 * 256
    wide = {**TINY_LLAMA, "vocab_size": vocab}
    t = TrainingSpec(method=Method.LORA, micro_batch_size=2, sequence_length=256, lora=ALL)
    trainer = simulate(wide, replace(t, recipe=Recipe.HF_TRAINER))
    sft = simulate(wide, replace(t, recipe=Recipe.TRL_SFT))
    assert trainer.peak_bytes - sft.peak_bytes >= tokens * vocab * 4
    architecture = architecture_from_config(json.dumps(wide))
    for simulated, recipe in ((trainer, Recipe.HF_TRAINER), (sft, Recipe.TRL_SFT)):
        plan = gpu_memory(architecture, replace(t, recipe=recipe), 1)
        planned = plan.allocated_bytes - plan.cuda_workspace_bytes  # only a real GPU allocates cuBLAS's workspace
        assert abs(planned - simulated.peak_bytes) <= 0.03 * simulated.peak_bytes, (recipe, planned, simulated)

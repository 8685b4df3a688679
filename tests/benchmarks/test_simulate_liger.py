"""Liger's kernels under the Trainer recipes (benchmarks/liger.py: the Trainer's use_liger_kernel, Liger's own autograd
functions, Triton launches and the fused loss's CUDA-only paths standing in as on CUDA) peak at the same bytes on fake
tensors as on real ones; and they change the step. A file of its own, so the suite's workers share the simulation
tests."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

os.environ.setdefault("DS_ACCELERATOR", "cpu")
pytest.importorskip("liger_kernel")

from benchmarks.simulate import simulate  # noqa: E402
from contract.schema import Method, Recipe, TrainingSpec  # noqa: E402
from tests.benchmarks.tiny import ALL, TINY_LLAMA, fake_equals_real  # noqa: E402

# hf-trainer's fused loss with the head's weight training (its gradient accumulated in place) and on QLoRA's fp32
# stream (autocast casts the fp32 head for each chunk: no preallocated buffer), and SFTTrainer, which keeps its own
# fused head under Liger's layer kernels
LIGER = [(Recipe.HF_TRAINER, Method.FULL), (Recipe.HF_TRAINER, Method.QLORA), (Recipe.TRL_SFT, Method.LORA)]


@pytest.mark.parametrize(("recipe", "method"), LIGER, ids=[f"{r.value}-{m.value}" for r, m in LIGER])
def test_a_fake_liger_step_peaks_at_the_same_bytes_as_the_real_step(recipe: Recipe, method: Method) -> None:
    t = TrainingSpec(method=method, micro_batch_size=2, sequence_length=64, lora=ALL, recipe=recipe, liger=True)
    fake = fake_equals_real(t)
    assert fake.by_phase["init"] < fake.peak_bytes


def test_liger_lowers_the_step_s_peak_and_its_patches_end_with_the_run() -> None:
    """Liger's kernels change the step (its fused loss keeps no logits, its norms no fp32 copies); and liger's apply
    functions, which patch transformers' modeling modules for every model made after them, are put back as the run
    ends, so a later plan without Liger runs transformers' own modules."""
    from transformers.models.llama import modeling_llama

    norm, mlp = modeling_llama.LlamaRMSNorm, modeling_llama.LlamaMLP
    t = TrainingSpec(method=Method.LORA, micro_batch_size=2, sequence_length=64, lora=ALL, recipe=Recipe.HF_TRAINER,
                     liger=True)
    patched = simulate(TINY_LLAMA, t, 1)
    assert (modeling_llama.LlamaRMSNorm, modeling_llama.LlamaMLP) == (norm, mlp)
    assert patched.peak_bytes < simulate(TINY_LLAMA, replace(t, liger=False), 1).peak_bytes

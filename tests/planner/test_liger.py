"""Liger's kernels (training.liger): what they save for backward, per decoder layer and outside the layers, differs
from transformers' own modules by exactly what the planner counts (saved_tensors_hooks on real models with Liger's own
autograd functions, their Triton launches standing in as on CUDA); the fused loss's chunk; what is refused."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("liger_kernel")

from benchmarks.liger import liger_as_on_cuda  # noqa: E402
from contract.errors import InvalidFieldError  # noqa: E402
from contract.schema import Hardware, LoraSpec, Method, Recipe, TrainingSpec  # noqa: E402
from planner import liger  # noqa: E402
from planner.activations import decoder_layer_saved_bytes, outside_layers_saved_bytes  # noqa: E402
from planner.catalog import default_catalog  # noqa: E402
from planner.errors import UnsupportedError  # noqa: E402
from planner.fit import LIGER_NOTE, fit  # noqa: E402
from planner.hf_config import architecture_from_config  # noqa: E402
from planner.memory import gpu_memory  # noqa: E402
from planner.parameters import parameter_split  # noqa: E402
from tests.planner.test_activations import LAYERS, MICRO_BATCH, SEQ, _model, _saved_by_layer  # noqa: E402

# SmolLM3 (planned as a Llama): its own patch, its middle layer without RoPE
CASES = [(family, method) for family in ("llama", "mistral", "qwen2", "qwen3", "smollm3")
         for method in ("full", "lora")]


def _measured(family: str, method: str, patched: bool) -> tuple[int, int, dict[str, object]]:
    """(a middle layer's, everything else's) saved bytes, with Liger applied as the Trainer applies it or not, and the
    model's config."""
    model = _model(family, "sdpa", method, torch.bfloat16, 0.0, ckpt=False)
    with liger_as_on_cuda():
        if patched:
            from liger_kernel.transformers import _apply_liger_kernel_to_instance

            _apply_liger_kernel_to_instance(model=model.get_base_model() if method == "lora" else model)
        by_layer, total = _saved_by_layer(model)
    return by_layer[1], total - LAYERS * by_layer[1], model.config.to_dict()


def _planned(model_config: dict[str, object], method: str, patched: bool) -> tuple[int, int]:
    a = architecture_from_config(json.dumps(model_config))
    t = TrainingSpec(method=Method(method), micro_batch_size=MICRO_BATCH, sequence_length=SEQ,
                     gradient_checkpointing=False, lora=LoraSpec(rank=4, alpha=8, dropout=0.0),
                     recipe=Recipe.HF_TRAINER, liger=patched)
    split = parameter_split(a, t.method, t.lora, False, 0)
    tokens = MICRO_BATCH * SEQ
    return decoder_layer_saved_bytes(a, t, split, tokens), outside_layers_saved_bytes(a, t, split, tokens)


@pytest.mark.parametrize(("family", "method"), CASES, ids=[f"{f}-{m}" for f, m in CASES])
def test_liger_changes_what_is_saved_by_what_the_planner_counts(family: str, method: str) -> None:
    """Per layer: the norms save their input and rstd (no fp32 upcast), the MLP its gate and up outputs (Qwen 3's q/k
    norms too); outside: the final norm as a layer's, and the fused loss saves the hidden states' gradient (and the
    head's weight's when it trains) where the standard loss saved fp32 log-probs, its labels and a scalar."""
    plain, patched = _measured(family, method, False), _measured(family, method, True)
    planned_plain, planned_patched = _planned(plain[2], method, False), _planned(plain[2], method, True)
    nll_total_weight = 4  # the standard loss's fp32 scalar, which the planner leaves out (test_activations)
    assert patched[0] - plain[0] == planned_patched[0] - planned_plain[0] < 0
    assert patched[1] - plain[1] == planned_patched[1] - planned_plain[1] - nll_total_weight


def test_the_fused_loss_projects_about_as_many_logits_as_hidden_states_at_once() -> None:
    """chunk_tokens is liger-kernel's own arithmetic (fused_linear_cross_entropy_forward): Llama 3's 128,256-word
    vocabulary over 4,096 hidden is 32 x the hidden size, so 8,192 tokens go 256 at a time; a vocabulary narrower than
    the hidden states takes every token at once."""
    llama = default_catalog().model("meta-llama/Llama-3.1-8B").architecture
    assert liger.chunk_tokens(llama, 8192) == 256
    assert liger.chunk_tokens(llama, 8191) == 256
    assert liger.chunk_tokens(llama, 100) == 4  # 100 / 32 rounded up, to the next power of two
    assert liger.chunk_tokens(replace(llama, vocab_size=1000), 64) == 64


def test_liger_lowers_a_large_vocabulary_s_peak_under_hf_trainer_and_not_the_fused_head_s_loss() -> None:
    """Under hf-trainer the fused loss replaces the fp32 logits (Llama 3.2 1B: 128,256 words); under trl-sft, whose
    own fused head stays, only the layers' savings remain."""
    llama = default_catalog().model("meta-llama/Llama-3.2-1B").architecture
    t = TrainingSpec(method=Method.LORA, micro_batch_size=1, sequence_length=2048, recipe=Recipe.HF_TRAINER)
    hf, hf_liger = (gpu_memory(llama, replace(t, liger=x), 1).activations_bytes for x in (False, True))
    assert hf_liger < hf / 2
    sft = replace(t, recipe=Recipe.TRL_SFT)
    sft_plain, sft_liger = (gpu_memory(llama, replace(sft, liger=x), 1) for x in (False, True))
    assert sft_liger.activations_bytes < sft_plain.activations_bytes
    assert sft_liger.logits_bytes == sft_plain.logits_bytes


def test_liger_is_a_trainer_s_modifier_for_the_families_simulated() -> None:
    with pytest.raises(InvalidFieldError, match="training.liger"):
        TrainingSpec(liger=True)
    gemma = default_catalog().model("google/gemma-2-9b").architecture
    with pytest.raises(UnsupportedError) as refused:
        liger.check(gemma, TrainingSpec(recipe=Recipe.HF_TRAINER, liger=True))
    assert refused.value.field == "training.liger"
    assert "without --liger" in str(refused.value)


def test_fit_points_a_logits_bound_trainer_plan_at_liger_and_says_what_a_liger_plan_is() -> None:
    """Llama-3.1-8B LoRA at 2 x 4,096 tokens under transformers' Trainer does not fit an L4 (its fp32 logits); Fit
    suggests Liger's fused loss, which takes a third off the total; a Liger plan's notes say how it was planned."""
    catalog = default_catalog()
    model, hw = catalog.model("meta-llama/Llama-3.1-8B"), Hardware(gpu=catalog.gpu("l4"))
    t = TrainingSpec(method=Method.LORA, micro_batch_size=2, sequence_length=4096, recipe=Recipe.HF_TRAINER)
    plain = fit(model, t, hw, catalog)
    suggested = {s.change: s for s in plain.suggestions}
    liger_suggested = suggested["--liger"]
    assert not plain.fits and liger_suggested.training.liger
    assert liger_suggested.per_gpu_total_bytes < 0.7 * plain.per_gpu.total_bytes
    patched = fit(model, replace(t, liger=True), hw, catalog)
    assert patched.per_gpu.total_bytes == liger_suggested.per_gpu_total_bytes and LIGER_NOTE in patched.notes

"""How the executor wraps a model for a plan (executor.training.model.prepare_model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from contract.schema import Method, Precision, TrainingSpec  # noqa: E402
from executor.training.model import prepare_model  # noqa: E402

LAYERS, TRAINABLE = 4, 1


@pytest.mark.parametrize("checkpointing", [True, False], ids=["ckpt", "nockpt"])
def test_freeze_keeps_the_frozen_layers_out_of_the_graph(checkpointing: bool) -> None:
    """Only the top layers train, so nothing below them needs a gradient: their inputs do not require one (with
    checkpointing transformers makes the embeddings' output require grad, which would keep every layer's input and
    run its backward), and the trainable layers still get theirs."""
    config = transformers.LlamaConfig(num_hidden_layers=LAYERS, hidden_size=32, intermediate_size=64,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=64)
    torch.manual_seed(0)
    model = prepare_model(transformers.AutoModelForCausalLM.from_config(config),
                          TrainingSpec(method=Method.FREEZE, freeze_trainable_layers=TRAINABLE,
                                       gradient_checkpointing=checkpointing))
    model.train()
    input_needs_grad: list[bool] = []
    for layer in model.model.layers:
        layer.register_forward_pre_hook(lambda m, args, kwargs: input_needs_grad.append(
            kwargs.get("hidden_states", args[0] if args else None).requires_grad), with_kwargs=True)
    ids = torch.randint(0, 64, (2, 8))
    model(input_ids=ids, labels=ids).loss.backward()

    assert input_needs_grad[:LAYERS] == [False] * LAYERS
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert trainable and all(p.grad is not None for p in trainable)
    assert all(p.grad is None for p in model.parameters() if not p.requires_grad)


@pytest.mark.parametrize("model_type", ["mixtral", "qwen2_moe", "deepseek_v3", "glm4_moe"])
def test_all_linear_on_a_mixture_of_experts_adapts_what_the_planner_counts(model_type: str) -> None:
    """PEFT would read all-linear on a mixture of experts as its 3-D expert tensors too (a ParamWrapper, which
    refuses the plan's dropout); the executor adapts the linear modules (Qwen2-MoE: its shared expert's too), as
    many parameters as the planner counts."""
    import json

    from contract.schema import ALL_LINEAR, LoraSpec
    from planner.architecture import lora_parameter_count, lora_targets
    from planner.hf_config import architecture_from_config

    shape = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=64, num_experts_per_tok=2)
    # DeepSeek-V3 and GLM-4.5 (a dense layer, then experts with a shared one): PEFT maps their MLP names onto the
    # routed experts, so all-linear adapts their attention
    shared_experts = dict(n_routed_experts=4, moe_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=1,
                          n_group=1, topk_group=1)
    config = {"mixtral": lambda: transformers.MixtralConfig(num_local_experts=4, **shape),
              "qwen2_moe": lambda: transformers.Qwen2MoeConfig(num_experts=4, moe_intermediate_size=32,
                                                               shared_expert_intermediate_size=64, **shape),
              "deepseek_v3": lambda: transformers.DeepseekV3Config(
                  **{**shape, "num_key_value_heads": 4}, **shared_experts, kv_lora_rank=16, q_lora_rank=24,
                  qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8),
              "glm4_moe": lambda: transformers.Glm4MoeConfig(**shape, **shared_experts)}[model_type]()
    lora = LoraSpec(target_modules=(ALL_LINEAR,))
    assert lora.dropout > 0
    model = prepare_model(transformers.AutoModelForCausalLM.from_config(config), TrainingSpec(method=Method.LORA,
                                                                                              lora=lora))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    arch = architecture_from_config(json.dumps(config.to_dict()))
    assert trainable == lora_parameter_count(lora_targets(arch, (ALL_LINEAR,), "t"), lora.rank)


def test_an_mlp_name_peft_maps_onto_the_experts_is_refused_naming_what_to_adapt() -> None:
    """In DeepSeek-V3 PEFT would adapt the routed experts' fused tensors for gate_proj, not the dense or shared MLPs
    the name reads as; the executor refuses it before loading anything, as the planner does."""
    from contract.errors import PlanError
    from contract.schema import LoraSpec
    from executor.training.peft_config import lora_targets

    config = transformers.DeepseekV3Config(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                                           num_attention_heads=4, num_key_value_heads=4, vocab_size=64,
                                           n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                           first_k_dense_replace=1, n_group=1, topk_group=1, kv_lora_rank=16,
                                           q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with pytest.raises(PlanError, match=r"lora.target_modules: PEFT maps gate_proj .*adapt kv_a_proj_with_mqa"):
        lora_targets(LoraSpec(target_modules=("q_proj", "gate_proj")), model)
    assert lora_targets(LoraSpec(target_modules=("q_proj", "kv_b_proj")), model) == ["q_proj", "kv_b_proj"]


def _saved_for_backward_bytes(model: Any) -> int:
    """Bytes autograd saves outside checkpointed regions in one forward (checkpointing's own hooks take the inside)."""
    total = 0

    def pack(x: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += x.numel() * x.element_size()
        return x

    ids = torch.randint(0, 30, (2, 16))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return total


@pytest.mark.parametrize("method", [Method.LORA, Method.QLORA, Method.FULL], ids=lambda m: m.value)
def test_the_loaded_model_trains_with_the_checkpointing_it_was_planned_with(method: Method, tiny_model: Path,
                                                                            tmp_path: Path) -> None:
    """from_pretrained returns eval mode, where transformers' layers skip checkpointing and dropout; the model the
    executor hands DeepSpeed is in training mode, and checkpointing keeps less for backward than none does. (On an
    H100 the eval-mode QLoRA runs matched the plan without checkpointing: 1.7-2.6x the plan with it.)"""
    from contract.run_config import DatasetConfig, RunConfig
    from executor.training.model import Host, load_model

    saved = {}
    for checkpointing in (True, False):
        t = TrainingSpec(method=method, gradient_checkpointing=checkpointing)
        cfg = RunConfig(plan_id="p", model_path=str(tiny_model), dataset=DatasetConfig(), training=t, world_size=1,
                        max_steps=1, epochs=1.0, seed=0, checkpoint_every_steps=0, output_dir=tmp_path,
                        deepspeed_config_json="{}")
        torch.manual_seed(0)
        model = load_model(cfg, Host(gpu_count=0))
        assert all(m.training for m in model.modules())
        saved[checkpointing] = _saved_for_backward_bytes(model)
    assert saved[True] < saved[False] / 2, saved


def test_a_rank_that_does_not_quantise_hides_bitsandbytes_from_peft_and_transformers() -> None:
    """Its import compiles kernels (seconds a process); the launcher sets the variable for a plan without QLoRA."""
    import importlib.util
    import os
    import subprocess
    import sys

    from executor.training.process import WITHOUT_BITSANDBYTES_ENV

    assert importlib.util.find_spec("bitsandbytes") is not None  # installed (the train extra), found without it
    probe = ("from executor.training.process import prepare; prepare(); "
             "import importlib.util, peft.import_utils as p, transformers.utils as t; "
             "print(importlib.util.find_spec('bitsandbytes') is not None, p.is_bnb_available(), "
             "t.is_bitsandbytes_available())")
    env = {**os.environ, WITHOUT_BITSANDBYTES_ENV: "1"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"] * 3


def test_a_rank_never_loads_deepspeed_s_muon_nor_the_compiler_it_pulls_in() -> None:
    """DeepSpeed imports its Muon modules on every ZeRO rank; the real original_muon applies torch.compile at import
    (about 1.5 s of CPU a rank). The stand-ins answer DeepSpeed's checks as the real modules do for AdamW, and
    refuse an update."""
    import subprocess
    import sys

    probe = ("from executor.training.process import prepare\nprepare()\n"
             "import sys, torch, executor.training.recipe, deepspeed.runtime.zero.stage_1_and_2, "
             "deepspeed.runtime.zero.stage3\n"
             "from deepspeed.runtime.zero.muon.muon_optimizer import MuonWithAuxAdam\n"
             "from deepspeed.runtime.zero.muon.original_muon import muon_update\n"
             "adamw = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))])\n"
             "try:\n    muon_update(torch.zeros(2, 2), torch.zeros(2, 2), 0.9)\n    refused = False\n"
             "except RuntimeError:\n    refused = True\n"
             "print(isinstance(adamw, MuonWithAuxAdam), refused, 'torch._inductor.compile_fx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-3:] == ["False", "True", "False"], out.stdout


def test_an_attention_the_family_lacks_is_refused_before_anything_loads() -> None:
    """gpt-oss has no SDPA for its attention sinks: transformers' own refusal, as a PlanError naming the field."""
    import torch

    from contract.errors import PlanError
    from contract.schema import Attention
    from executor.training.model import check_attention

    config = transformers.GptOssConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=32, num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=8, vocab_size=64, num_local_experts=4,
                                       num_experts_per_tok=2)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    with pytest.raises(PlanError, match=r"training.attention: .*scaled_dot_product_attention.*eager attention"):
        check_attention(model, TrainingSpec(attention=Attention.SDPA))
    check_attention(model, TrainingSpec(attention=Attention.EAGER))


@pytest.mark.parametrize(("zero_stage", "precision", "reentrant", "embedding_dtype"), [
    (3, Precision.BF16, True, torch.bfloat16), (2, Precision.BF16, False, torch.bfloat16),
    (3, Precision.FP32, True, torch.float32)], ids=["zero3-bf16", "zero2-bf16", "zero3-fp32"])
def test_a_quantised_model_is_upcast_for_an_fp32_step_only_and_checkpointed_reentrantly_under_zero_3(
        tiny_model: Path, tmp_path: Path, zero_stage: int, precision: Precision, reentrant: bool,
        embedding_dtype: torch.dtype) -> None:
    """Under mixed precision DeepSpeed casts the model back to bf16, so PEFT's fp32 casts would only raise loading's
    peak (planner.loading); under ZeRO-3 bitsandbytes' matmul would hold every layer's gathered weight from a
    non-reentrant forward to backward (executor.training.model.reentrant_checkpointing)."""
    from contract.run_config import DatasetConfig, RunConfig
    from executor.training.model import Host, load_model

    t = TrainingSpec(method=Method.QLORA, zero_stage=zero_stage, precision=precision)
    cfg = RunConfig(plan_id="p", model_path=str(tiny_model), dataset=DatasetConfig(), training=t, world_size=1,
                    max_steps=1, epochs=1.0, seed=0, checkpoint_every_steps=0, output_dir=tmp_path,
                    deepspeed_config_json="{}")
    model = load_model(cfg, Host(gpu_count=0))
    assert model.get_input_embeddings().weight.dtype is embedding_dtype
    layer = model.base_model.model.model.layers[0]
    assert layer.gradient_checkpointing and layer._gradient_checkpointing_func.keywords["use_reentrant"] is reentrant
    # reentrant checkpointing needs an input that requires grad, which the embeddings' output then does
    ids = torch.randint(0, 30, (1, 8))
    assert model.get_input_embeddings()(ids).requires_grad

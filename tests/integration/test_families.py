"""The families planned since the executor last changed train for real on the CPU executor: a tiny DeepSeek-V3
(latent attention, a dense layer, routed and shared experts), GLM-4.5, gpt-oss (eager: its sinks) and Llama 4
(interleaved dense and sparse layers, NoPE layers) learn with LoRA all-linear and dropout, and export an adapter of
exactly the parameters the planner counts, none on the experts (PEFT would map DeepSeek's and GLM's MLP names onto
them) nor on a router (Llama 4's is a Linear whose forward PEFT's LoRA layer cannot wrap)."""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers
from tunefleet.v1 import training_pb2

from contract.schema import ALL_LINEAR
from devtools.tiny import build_model, counting_text, make_plan, write_plan
from executor.training.launcher import train
from planner.architecture import lora_parameter_count, lora_targets
from planner.hf_config import architecture_from_config
from tests.integration.training_helpers import exported

pytestmark = [pytest.mark.integration, pytest.mark.training]

SHARED_EXPERTS = dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
                      first_k_dense_replace=1, n_group=1, topk_group=1, layers=3)
FAMILIES = {
    "deepseek_v3": (transformers.DeepseekV3Config, dict(SHARED_EXPERTS, num_key_value_heads=4, kv_lora_rank=16,
                                                          q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=8,
                                                          v_head_dim=8)),
    "glm4_moe": (transformers.Glm4MoeConfig, dict(SHARED_EXPERTS, attention_bias=True)),
    "gpt_oss": (transformers.GptOssConfig, dict(head_dim=16, intermediate_size=32, num_local_experts=4,
                                                num_experts_per_tok=2, sliding_window=8, layers=3)),
    "llama4_text": (transformers.Llama4TextConfig, dict(head_dim=16, intermediate_size=32, intermediate_size_mlp=96,
                                                        num_local_experts=4, num_experts_per_tok=1,
                                                        interleave_moe_layer_step=2, no_rope_layer_interval=2,
                                                        attention_chunk_size=64, layers=4)),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_new_family_trains_with_lora_all_linear_and_exports_what_the_planner_counts(family: str,
                                                                                     tmp_path: Path) -> None:
    config_class, shape = FAMILIES[family]
    model = build_model(tmp_path / "model", config_class=config_class, **shape)
    data = counting_text(tmp_path / "data.jsonl", records=32)
    plan = make_plan(model, data, tmp_path / "out", max_steps=6, checkpoint_every=3, target_modules=(ALL_LINEAR,))
    plan.training.lora.dropout = 0.1  # PEFT's wrapper of fused expert tensors would refuse it
    if family == "gpt_oss":
        plan.training.attention = training_pb2.ATTENTION_EAGER
    result = train(write_plan(plan, tmp_path / "plan.json"), progress_interval_s=0)
    assert result.succeeded, result.last_event.message

    adapter = exported(tmp_path / "out")
    assert not [name for name in adapter if "experts." in name and "shared_experts" not in name or "router" in name]
    arch = architecture_from_config((model / "config.json").read_text())
    planned = lora_parameter_count(lora_targets(arch, (ALL_LINEAR,), "t"), plan.training.lora.rank)
    assert sum(t.numel() for t in adapter.values()) == planned

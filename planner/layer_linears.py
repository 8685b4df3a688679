"""A decoder layer's linears as the activations model sees them: grouped by the input they share, and what each group
saves for backward (its input, its adapters' dropout and outputs, LLM.int8's kept inputs). Pure functions, used by
planner.activations."""

from __future__ import annotations

from dataclasses import dataclass

from contract.model import Architecture, Family
from contract.schema import Attention, Method, TrainingSpec
from planner import constants as k
from planner import recipes
from planner.architecture import SHARED_EXPERTS_MOE
from planner.parameters import ParameterSplit


def first_linears(a: Architecture) -> tuple[str, ...]:
    """The linears that read a layer's input norm: q, k and v, and in Phi's parallel block fc1 too."""
    return ("q_proj", "k_proj", "v_proj", "fc1") if a.family is Family.PHI else qkv_names(a)


def qkv_names(a: Architecture) -> tuple[str, ...]:
    """The linears that read the attention input: Phi-3 fuses them into one; latent attention reads it into its query
    (latent) and its key/value latent."""
    if a.latent_attention is not None:
        return ("q_a_proj" if a.latent_attention.q_lora_rank else "q_proj", "kv_a_proj_with_mqa")
    return ("qkv_proj",) if a.family is Family.PHI3 else ("q_proj", "k_proj", "v_proj")


@dataclass(frozen=True)
class Linear:
    names: tuple[str, ...]
    width: int
    # The input is a tensor something else already saves (the attention output for o_proj under SDPA/flash).
    input_already_saved: bool = False


def group_input_bytes(group: Linear, t: TrainingSpec, split: ParameterSplit) -> float:
    """Inputs saved by a group of linears that share one input tensor, and their adapters' outputs, per token."""
    b = t.precision.element_bytes
    if t.method in (Method.FULL, Method.FREEZE):
        return 0.0 if group.input_already_saved else b * group.width
    hits = sum(1 for n in group.names if n in split.adapted_decoder_names)
    if not hits:
        return 0.0
    la = recipes.adapter_compute_bytes(t)
    lora_out = hits * la * t.lora.rank  # lora_A's output, saved by lora_B
    if t.applies_lora_dropout:  # each adapter draws its own dropout: a new tensor plus its mask
        return hits * (la + k.DROPOUT_MASK_BYTES) * group.width + lora_out
    if la != b:  # each adapter casts the input to its own dtype, a copy its lora_A saves
        return hits * la * group.width + lora_out
    return (0.0 if group.input_already_saved else b * group.width) + lora_out


def linear_groups(a: Architecture, t: TrainingSpec, dense: bool = False) -> list[Linear]:
    """A decoder layer's linears, grouped by the input tensor they share (`dense`: one of the dense layers of a
    mixture of experts)."""
    h, q, i = a.hidden_size, a.q_dim, a.intermediate_size
    flash_like = t.attention in (Attention.SDPA, Attention.FLASH)
    m = a.latent_attention
    if m is not None:
        # the query latent, the key/value latent and every head's expanded key part and value read through linears
        groups = [Linear(qkv_names(a), h), Linear(("kv_b_proj",), m.kv_lora_rank),
                  Linear(("o_proj",), a.v_dim, flash_like)]
        groups += [Linear(("q_b_proj",), m.q_lora_rank)] if m.q_lora_rank else []
    elif a.family is Family.GPT2:
        groups = [Linear(("c_attn",), h), Linear(("c_proj",), h, flash_like), Linear(("c_fc",), h),
                  Linear(("mlp.c_proj",), i)]
    elif a.family is Family.PHI:
        # one LayerNorm, whose output the attention and the MLP both read (a parallel block)
        groups = [Linear(first_linears(a), h), Linear(("dense",), q, flash_like), Linear(("fc2",), i)]
    elif a.family is Family.STARCODER2:
        groups = [Linear(qkv_names(a), h), Linear(("o_proj",), q, flash_like), Linear(("c_fc",), h),
                  Linear(("c_proj",), i)]
    else:
        qkv = qkv_names(a)
        gate_up = ("gate_up_proj",) if a.family is Family.PHI3 else ("gate_proj", "up_proj")
        groups = [Linear(qkv, h), Linear(("o_proj",), q, flash_like)]
        if not a.num_experts:  # a mixture of experts' feed-forward is counted with its experts below
            groups += [Linear(gate_up, h), Linear(("down_proj",), i)]
        elif a.shared_expert_intermediate_size and a.family is Family.QWEN2_MOE:
            # Qwen2-MoE's shared expert and its gate read the MLP's input
            groups += [Linear(("gate_proj", "up_proj", "shared_expert_gate"), h),
                       Linear(("down_proj",), a.shared_expert_intermediate_size)]
    shared_experts_moe = a.family in SHARED_EXPERTS_MOE
    if a.family is Family.LLAMA4:  # a dense layer's MLP, or a sparse one's shared expert
        groups += [Linear(("gate_proj", "up_proj"), h), Linear(("down_proj",), a.dense_intermediate_size)] if dense \
            else [Linear(("shared_expert.gate_proj", "shared_expert.up_proj"), h),
                  Linear(("shared_expert.down_proj",), i)]
    elif shared_experts_moe and dense:
        groups += [Linear(("gate_proj", "up_proj"), h), Linear(("down_proj",), a.dense_intermediate_size)]
    elif shared_experts_moe:
        groups += [Linear(("shared_experts.gate_proj", "shared_experts.up_proj"), h),
                   Linear(("shared_experts.down_proj",), a.shared_expert_intermediate_size)]
    return groups


def int8_stash_bytes(t: TrainingSpec, split: ParameterSplit, groups: list[Linear], unsaved_only: bool) -> float:
    """LLM.int8's matmul (bitsandbytes autograd/_functions.py: MatMul8bitLt) keeps its input and the input's outlier
    columns (k.LLM_INT8_OUTLIER_COLUMNS) on its autograd context as plain attributes, not as saved tensors, so
    checkpointing's hooks never drop them: every 8-bit linear's input stays alive from the forward to its backward,
    checkpointed or not. Per token: each group's shared input — all of them (`unsaved_only` False: what a
    checkpointed layer's first forward leaves), or those the layer does not save otherwise (an adapter's dropout draws
    a new tensor; a frozen linear saves no input) — and every linear's outlier columns. Simulated: Llama-3.1-8B 8-bit
    LoRA under checkpointing, each layer's normalised inputs, attention output and gate-times-up product alive
    through the step (make bench-simulate)."""
    if t.method is not Method.LORA_8BIT:
        return 0.0
    b = t.precision.element_bytes
    def saved_otherwise(g: Linear) -> bool:
        return g.input_already_saved or (not t.applies_lora_dropout and
                                         any(n in split.adapted_decoder_names for n in g.names))

    inputs = sum(b * g.width for g in groups if not (unsaved_only and saved_otherwise(g)))
    return inputs + sum(len(g.names) for g in groups) * k.LLM_INT8_OUTLIER_COLUMNS * b

"""What a recomputed decoder layer holds at its peak beyond the tensors it saves (planner.activations counts those):
its MLP backward's gradients, fp32 adapters' input casts in its forward, less what TRL's fused head saved and freed.
Pure functions, from what make bench-simulate shows."""

from __future__ import annotations

from contract.model import Architecture, Family
from contract.schema import Method, TrainingSpec
from planner import constants as k
from planner import liger, recipes
from planner.architecture import LAYER_NORM_FAMILIES
from planner.parameters import ParameterSplit


def _mlp_backward_bytes(a: Architecture, t: TrainingSpec, split: ParameterSplit, tokens: int) -> int:
    """A recomputed dense gated MLP's backward: the gradient of the activated gate times up product, then one per
    factor, alive with what the layer saved. Where the down projection's input is kept for backward (its weight
    trains, or an adapter reads it) that input, counted as saved, is freed by then: one fewer (simulated: trl-sft
    QLoRA on q,v and on q,k,v,o, 3; LoRA on every linear, 2). hf-trainer QLoRA's fp32 stream: 2 (simulated). Llama 4's
    sparse layer, the largest: the gradient of every expert's output, which backward reshapes into a copy before the
    batched matmuls' (simulate.csv's row 'Llama-4-Maverick-17B-128E lora[all-linear] mb1x2048 ckpt sdpa z3 x8')."""
    if a.family is Family.LLAMA4:
        return a.num_experts * a.hidden_size * tokens * t.precision.element_bytes
    if a.num_experts or a.family in LAYER_NORM_FAMILIES:
        return 0
    down_read = t.method in (Method.FULL, Method.FREEZE) or any(
        layer.in_features == a.intermediate_size for layer in split.decoder_lora_layers)
    if liger.layers_patched(t):
        # Liger's SwiGLU backward writes the gate's and up's gradients into the outputs it saved: only the product's
        # gradient is new (simulated: Qwen3-8B and Mistral-7B LoRA on the attention). Where the down projection's
        # input is read, its backward peaks as the input's gradient is made while the input is held, beside the
        # hidden-sized gradients: as the unfused MLP's on a bf16 stream (simulated: trl-sft Llama-3.2-1B and
        # Llama-3.1-8B QLoRA on every linear), one fp32 tensor on hf-trainer QLoRA's fp32 stream, whose adapter
        # computes that gradient in autocast's bf16 (simulated: Llama-3.2-1B, Qwen2.5-7B)
        tensors = (1 if recipes.fp32_stream(t) else 2) if down_read else 1
    else:
        tensors = 2 if down_read or recipes.fp32_stream(t) else 3
    return tensors * a.intermediate_size * tokens * t.precision.element_bytes


def gated_mlp_saved_bytes(a: Architecture, t: TrainingSpec, tokens: int) -> int:
    """What a dense gated MLP saves besides its projections' inputs: the gate's output, its activation and the up
    output (their product is the down projection's input, counted with the projections' inputs), Liger's SwiGLU the
    gate and up outputs only; none for a mixture of experts, a LayerNorm family's MLP or Llama 4's."""
    if a.num_experts or a.family in LAYER_NORM_FAMILIES or a.family is Family.LLAMA4:
        return 0
    return (2 if liger.layers_patched(t) else 3) * a.intermediate_size * tokens * t.precision.element_bytes


def _adapter_cast_peak_bytes(a: Architecture, t: TrainingSpec, split: ParameterSplit, tokens: int) -> int:
    """fp32 adapters on a bf16 stream: the widest adapted input's fp32 casts (recipes.adapter_cast_bytes) in a
    layer's forward, with k.CAST_PEAK_HIDDEN_TENSORS hidden-sized tensors alive beside them. With adapters on the
    attention only, that is before the MLP runs: what the MLP saves is not there yet (simulated: Liger's Mistral-7B
    LoRA on q, k, v, o, whose loss leaves the recomputed layer the peak)."""
    cast = recipes.adapter_cast_bytes(t, split, tokens)
    if not cast:
        return 0
    mlp_adapted = any(a.intermediate_size in (x.in_features, x.out_features) for x in split.decoder_lora_layers)
    before_mlp = 0 if mlp_adapted else gated_mlp_saved_bytes(a, t, tokens)
    return cast + k.CAST_PEAK_HIDDEN_TENSORS * tokens * a.hidden_size * t.precision.element_bytes - before_mlp


def head_saved_bytes(a: Architecture, t: TrainingSpec) -> int:
    """What TRL's fused head saved (counted outside the layers), freed by its backward before any layer's."""
    return recipes.fused_head_saved_bytes(a, t) if recipes.fused_head(t) else 0


def layer_peak_extra_bytes(a: Architecture, t: TrainingSpec, split: ParameterSplit, tokens: int) -> int:
    """What the recomputed layer holds at its peak beyond what it saves: its MLP backward's gradients, or the fp32
    adapters' casts in its forward; less what the fused head saved, freed by then. `t` carries the stream's
    precision (recipes.activation_spec)."""
    extra = max(_mlp_backward_bytes(a, t, split, tokens), _adapter_cast_peak_bytes(a, t, split, tokens))
    return extra - head_saved_bytes(a, t)

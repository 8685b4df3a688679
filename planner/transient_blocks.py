"""The short-lived blocks of a step that PyTorch's caching allocator keeps cached beside its peak
(planner.memory.allocator_slack_terms). Pure."""

from __future__ import annotations

from contract.model import Architecture
from contract.schema import Loss, Recipe, TrainingSpec
from planner import constants as k
from planner import liger, recipes, torchtune
from planner.activations import layers_saved_bytes
from planner.architecture import linear_layers
from planner.layer_peak import layer_peak_extra_bytes
from planner.parameters import ParameterSplit


def transient_block_bytes(a: Architecture, t: TrainingSpec, split: ParameterSplit) -> tuple[int, int, int]:
    """The short-lived blocks whose segments PyTorch's caching allocator keeps cached beside a step's peak
    (planner.memory.allocator_slack_terms): one fp32 vocab-sized block of the loss (TRL's fused head: its bf16 tile;
    torchtune's: one output chunk's fp32 upcast), one decoder layer's saved tensors with what it holds beyond them at
    its peak (what recompute rebuilds under checkpointing; what backward frees first without it), and a quantised
    model's largest dequantised weight (bitsandbytes dequantises a 4-bit weight into a bf16 copy for each matmul past
    a few rows, an 8-bit one in each backward). `t` carries the activations' precision (fp32 under hf-trainer
    QLoRA)."""
    tokens = t.sequences_per_micro_batch * t.sequence_length
    rows = min(tokens, k.CHUNKED_LOSS_TOKENS) if t.loss is Loss.CHUNKED else \
        torchtune.chunk_tokens(t) if t.recipe is Recipe.TORCHTUNE else tokens
    layer = layers_saved_bytes(a, t, split, tokens)[1] + layer_peak_extra_bytes(a, t, split, tokens)
    dequantised = 0
    if t.method.quantises:
        dequantised = 2 * max((x.in_features * x.out_features for x in linear_layers(a) if x.part == "decoder"),
                              default=0)
    if recipes.fused_head(t):
        return recipes.fused_head_tile_bytes(t), layer, dequantised
    if liger.fused_loss(t):
        return liger.chunk_tokens(a, tokens) * a.vocab_size * t.precision.element_bytes, layer, dequantised
    return rows * a.vocab_size * 4, layer, dequantised

"""torchtune's single-device recipes (training.recipe torchtune): which plans they cover and how a plan maps onto
their config. Pure.

torchtune 0.6.1 builds the model with its own modules (torchtune/modules: TransformerSelfAttentionLayer,
MultiHeadAttention, RMSNorm, FeedForward, LoRALinear), not transformers', in the config's dtype (bf16): weights,
gradients and AdamW's states all bf16 (the plan's precision bf16-pure); its configs' loss is CEWithChunkedOutputLoss,
the model's output projected in NUM_OUTPUT_CHUNKS chunks along the sequence. benchmarks/torchtune_recipe.py runs the
recipes themselves under fake tensors."""

from __future__ import annotations

from typing import Any

from contract.model import Architecture, Family
from contract.schema import ALL_LINEAR, Attention, Loss, Method, Objective, Offload, Precision, TrainingSpec
from planner.errors import UnsupportedError

# the families whose torchtune builders the planner sizes (torchtune/models: llama3_2, qwen2, mistral)
TORCHTUNE_FAMILIES = (Family.LLAMA, Family.QWEN2, Family.MISTRAL)
# CEWithChunkedOutputLoss(num_output_chunks=8) in torchtune/modules/loss/ce_chunked_output_loss.py, the default every
# recipe config takes
NUM_OUTPUT_CHUNKS = 8
# torchtune's RoPE cache (torchtune/modules/position_embeddings.py: RotaryPositionalEmbeddings.build_rope_cache): cos
# and sin of every position up to max_seq_len, fp32, head_dim / 2 pairs each
ROPE_CACHE_BYTES_PER_ELEMENT = 4
# CEWithChunkedOutputLoss upcasts each output chunk to fp32 (compute_cross_entropy: logits.float()) for
# F.cross_entropy, whose log_softmax saves its fp32 output
LOSS_FP32_BYTES = 4
# the output projection's backward over its chunks (`head_backward_bytes`): full-size weight gradients alive at once
# (the sum so far, the chunk's, their sum) and fp32 chunk-sized logits gradients
HEAD_GRADIENT_COPIES = 3
HEAD_BACKWARD_CHUNK_COPIES = 3
# torchtune's LoRA names: the attention's four projections (LORA_ATTN_MODULES), the MLP's three as one switch
_ATTENTION = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "o_proj": "output_proj"}
_MLP = ("gate_proj", "up_proj", "down_proj")
_FIELD = "training.recipe"


def check(a: Architecture, t: TrainingSpec, world_size: int) -> None:
    """Refuse what the simulated torchtune recipes do not cover, naming what to change."""
    if a.family not in TORCHTUNE_FAMILIES or a.vision is not None:
        raise UnsupportedError(_FIELD, f"torchtune is modelled for {', '.join(f.value for f in TORCHTUNE_FAMILIES)} "
                                       f"(its llama3_2, qwen2 and mistral builders) so far, not {a.family.value}; "
                                       "plan it with recipe tunefleet or hf-trainer")
    if a.head_dim not in (0, a.hidden_size // a.num_attention_heads):
        raise UnsupportedError(_FIELD, f"torchtune's builders take head_dim as hidden_size / num_attention_heads; "
                                       f"this model's is {a.head_dim}: plan it with recipe tunefleet or hf-trainer")
    if t.method not in (Method.LORA, Method.FULL):
        raise UnsupportedError("training.method", f"torchtune is modelled for its lora and full single-device recipes, "
                                                  f"not {t.method.value}; plan {t.method.value} with recipe tunefleet")
    if t.precision is not Precision.BF16_PURE:
        raise UnsupportedError("training.precision", "torchtune's recipes train in bf16 throughout (dtype: bf16: no "
                                                     "fp32 master weights, bf16 AdamW states); plan it with "
                                                     "--precision bf16-pure")
    if world_size > 1 or t.zero_stage or t.offload is not Offload.NONE:
        raise UnsupportedError(_FIELD, "torchtune is modelled on one GPU (its single-device recipes), without "
                                       "sharding or offload; plan several GPUs with recipe tunefleet or hf-trainer")
    if t.attention is Attention.EAGER:
        raise UnsupportedError("training.attention", "torchtune's attention is PyTorch's SDPA; plan it with "
                                                     "--attention sdpa")
    if t.loss is not Loss.STANDARD:
        raise UnsupportedError("training.loss", "torchtune's recipes bring their own chunked cross-entropy "
                                                "(CEWithChunkedOutputLoss), which the plan counts as they run it; "
                                                "drop --loss")
    if t.objective is not Objective.SFT:
        raise UnsupportedError(_FIELD, "torchtune is modelled for supervised fine-tuning; plan DPO with recipe "
                                       "trl-dpo or tunefleet")
    if t.method is Method.LORA:
        lora_arguments(t)


def lora_arguments(t: TrainingSpec) -> dict[str, Any]:
    """The LoRA part of the recipe's model config for the plan's LoRA: torchtune's attention module names, and the
    MLP's projections all adapted or none (apply_lora_to_mlp)."""
    targets = set(t.lora.target_modules)
    if ALL_LINEAR in targets:
        targets = set(_ATTENTION) | set(_MLP)
    unknown = targets - set(_ATTENTION) - set(_MLP)
    mlp = targets & set(_MLP)
    if unknown or mlp not in (set(), set(_MLP)):
        raise UnsupportedError("training.lora.target_modules",
                               "torchtune adapts q_proj, k_proj, v_proj and o_proj (output_proj) by name and the "
                               "MLP's gate, up and down projections together (apply_lora_to_mlp); got "
                               f"{', '.join(sorted(targets))}")
    return {"lora_attn_modules": [_ATTENTION[n] for n in _ATTENTION if n in targets],
            "apply_lora_to_mlp": bool(mlp), "apply_lora_to_output": False, "lora_rank": t.lora.rank,
            "lora_alpha": t.lora.alpha, "lora_dropout": t.lora.dropout}


def builder_arguments(a: Architecture) -> dict[str, Any]:
    """The family builder's size arguments for the architecture (torchtune/models/<family>/_component_builders.py);
    max_seq_len sizes the rotary cache, as the model's released builders set it to its context length."""
    arguments: dict[str, Any] = {
        "vocab_size": a.vocab_size, "num_layers": a.num_layers, "num_heads": a.num_attention_heads,
        "num_kv_heads": a.num_key_value_heads, "embed_dim": a.hidden_size, "intermediate_dim": a.intermediate_size,
        "max_seq_len": _max_seq_len(a)}
    if a.family is not Family.MISTRAL:
        arguments["tie_word_embeddings"] = a.tie_word_embeddings
    return arguments


def rope_cache_bytes(a: Architecture, t: TrainingSpec) -> int:
    """The model's RoPE caches, fp32: [max_seq_len, head_dim / 2, 2] (RotaryPositionalEmbeddings, Llama3ScaledRoPE),
    or Qwen2's cos and sin of every dimension side by side, [max_seq_len, 2 head_dim] (Qwen2RotaryPositionalEmbeddings).
    The base builders make one for every layer; lora_qwen2 and lora_mistral make one in each layer's attention
    (lora_<family>_self_attention), lora_llama3_2 one for all."""
    widths = 2 if a.family is Family.QWEN2 else 1
    copies = a.num_layers if t.method is Method.LORA and a.family in (Family.QWEN2, Family.MISTRAL) else 1
    return copies * ROPE_CACHE_BYTES_PER_ELEMENT * _max_seq_len(a) * widths * a.resolved_head_dim


def layer_fixed_bytes(a: Architecture, t: TrainingSpec) -> int:
    """What a layer saves whatever the micro-batch: Qwen2's RoPE casts its cache's cos and sin to the activations'
    dtype for each of q and k (Qwen2RotaryPositionalEmbeddings.forward: .to(x.dtype)), which the multiplies save —
    [sequence, head_dim] each; the others' RoPE multiplies save views of the cache."""
    if a.family is not Family.QWEN2:
        return 0
    return 2 * 2 * t.precision.element_bytes * t.sequence_length * a.resolved_head_dim


def _max_seq_len(a: Architecture) -> int:
    """The builder's max_seq_len: the model's context length, as its released builders set it (4,096 where the config
    names none)."""
    return a.max_position_embeddings or 4096


def loss_bytes(a: Architecture, t: TrainingSpec) -> int:
    """The loss's peak term: its forward (`loss_forward_bytes`), or where the output projection trains (full
    fine-tuning), the start of backward if more (`head_backward_bytes`)."""
    forward = loss_forward_bytes(a, t)
    return max(forward, head_backward_bytes(a, t)) if t.method is Method.FULL else forward


def head_backward_bytes(a: Architecture, t: TrainingSpec) -> int:
    """The output projection's backward, chunk by chunk, as backward begins (simulated: Llama-3.2-1B full without
    checkpointing, its peak there): each chunk's weight gradient is added to the sum of the ones before, so two
    full-size gradients and their sum are alive, beside HEAD_BACKWARD_CHUNK_COPIES fp32 chunk-sized gradients of
    the logits."""
    chunk = chunk_tokens(t)
    weight = a.vocab_size * a.hidden_size * t.precision.element_bytes
    return HEAD_GRADIENT_COPIES * weight + HEAD_BACKWARD_CHUNK_COPIES * chunk * a.vocab_size * LOSS_FP32_BYTES


def loss_forward_bytes(a: Architecture, t: TrainingSpec) -> int:
    """What the recipe's loss step holds at its peak, the last chunk's cross-entropy (simulated): the model's
    output chunks (bf16, the whole sequence: the recipe keeps the list until the loss returns), every chunk's saved
    fp32 log-softmax (the chunks' losses are summed into one graph, so none is freed before backward) and the last
    chunk's fp32 upcast. Chunking keeps the fp32 upcasts one at a time; it does not spare the log-softmaxes (without
    torch.compile)."""
    tokens = t.sequences_per_micro_batch * t.sequence_length
    last_chunk = chunk_tokens(t) * LOSS_FP32_BYTES
    return a.vocab_size * (tokens * (t.precision.element_bytes + LOSS_FP32_BYTES) + last_chunk)


def chunk_tokens(t: TrainingSpec) -> int:
    """Tokens in one output chunk: the sequence split NUM_OUTPUT_CHUNKS ways (torch.chunk: the first chunks
    ceil(s / n) long), for every sequence of the micro-batch."""
    return t.sequences_per_micro_batch * -(-t.sequence_length // NUM_OUTPUT_CHUNKS)

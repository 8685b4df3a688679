"""Activations a training step keeps for backward: per decoder layer, tensor by tensor as transformers, PEFT and
PyTorch save them (checked against saved_tensors_hooks in tests/planner/test_activations.py), and outside the
layers (embeddings, final norm, logits and loss). Pure functions; no I/O."""

from __future__ import annotations

from contract.model import Architecture, Family
from contract.schema import Attention, Loss, Method, Objective, Recipe, TrainingSpec
from planner import constants as k
from planner import liger, recipes, torchtune
from planner.architecture import (
    LAYER_NORM_FAMILIES,
    SHARED_EXPERTS_MOE,
    norms_per_layer,
    qk_norm_rows,
)
from planner.layer_linears import (
    Linear,
    first_linears,
    group_input_bytes,
    int8_stash_bytes,
    linear_groups,
)
from planner.layer_peak import gated_mlp_saved_bytes, head_saved_bytes, layer_peak_extra_bytes
from planner.parameters import ParameterSplit

# Norms that multiply by their weight in fp32, so that a trained weight's multiply saves the fp32 normalised input
_FP32_WEIGHT_MULTIPLY = (Family.GEMMA, Family.GEMMA2, Family.GEMMA3, Family.OLMO2, Family.GPT_OSS)
# Norms that multiply by (1 + weight), a new fp32 vector each call that the multiply saves
_GEMMA_NORMS = (Family.GEMMA, Family.GEMMA2, Family.GEMMA3)


def _norm_bytes(a: Architecture, b: int, weight_trains: bool, liger_norm: bool = False,
                fp32_normalised: bool = False) -> float:
    """Bytes one norm saves for backward, per token.

    RMSNorm upcasts its input to fp32 (saved for pow/mul) and saves the fp32 rstd; when its weight trains,
    the normalised input to the weight multiply is saved too (fp32 in Gemma, which multiplies in fp32).
    LayerNorm (GPT-2, Phi, StarCoder2) saves its input, mean and rstd whether or not its weight trains.
    Liger's RMSNorm (`liger_norm`) saves its input and the rstd (planner.liger); torchtune's (`fp32_normalised`)
    normalises and multiplies in fp32 (F.rms_norm(x.float(), weight=scale)), so its normalised input is fp32.
    """
    h = a.hidden_size
    if liger_norm:
        return liger.norm_bytes_per_row(h, b)
    if a.family in LAYER_NORM_FAMILIES:
        return b * h + 8
    normalised = (4 if a.family in _FP32_WEIGHT_MULTIPLY or fp32_normalised else b) * h if weight_trains else 0
    return 4 * h + 4 + normalised


def _head_norms_bytes(a: Architecture, b: int, weight_trains: bool, q: bool = True, k: bool = True,
                      liger_norm: bool = False) -> float:
    """Bytes the q_norm and k_norm (qk_norm_rows: over each head, or over the whole projection) save per token: the
    fp32 upcast, the fp32 rstd per row and, when the weight trains, the normalised input to its multiply (fp32 in
    Gemma 3 and OLMo 2, which multiply in fp32), as `_norm_bytes`; Liger's (`liger_norm`) its input and rstd a row."""
    rows_q, rows_k = qk_norm_rows(a)
    if not rows_q:
        return 0.0
    normalised = 4 if a.family in _FP32_WEIGHT_MULTIPLY else b
    widths = [(a.q_dim, rows_q)] * q + [(a.kv_dim, rows_k)] * k
    if liger_norm:
        return sum(liger.norm_bytes_per_row(width, b, rows) for width, rows in widths)
    return sum(4 * width + 4 * rows + (normalised * width if weight_trains else 0) for width, rows in widths)


def _latent_norms_bytes(a: Architecture, b: int, weight_trains: bool, q: bool = True, kv: bool = True) -> float:
    """Bytes latent attention's q_a_layernorm (with a query latent) and kv_a_layernorm save per token, as a layer's
    RMSNorm does over their widths."""
    m = a.latent_attention
    if m is None:
        return 0.0
    widths = [m.q_lora_rank] * (q and m.q_lora_rank > 0) + [m.kv_lora_rank] * kv
    return sum(4 * w + 4 + (b * w if weight_trains else 0) for w in widths)


def _before_scores_bytes_per_token(a: Architecture, t: TrainingSpec, split: ParameterSplit) -> float:
    """What a recomputed layer still holds when backward reaches its eager attention scores (the MLP and the
    output projection done): its input norm, the q/k/v inputs and adapters, q/k norms, q and k (repeated) as the
    scores' matmul saves them."""
    b, full, patched = t.precision.element_bytes, t.method in (Method.FULL, Method.FREEZE), liger.layers_patched(t)
    norm = 0.0 if a.family is Family.OLMO2 else _norm_bytes(a, b, full, patched, t.recipe is Recipe.TORCHTUNE)
    qkv = group_input_bytes(Linear(first_linears(a), a.hidden_size), t, split)
    return norm + _head_norms_bytes(a, b, full, liger_norm=patched) + qkv + 2 * b * a.q_dim


def _decoder_layer_bytes_per_token(a: Architecture, t: TrainingSpec, split: ParameterSplit,
                                   seq_len: int, dense: bool = False, rope: bool = True) -> float:
    """Bytes one decoder layer saves for backward, per token of the micro-batch (`dense`: one of the dense layers
    of a mixture of experts; `rope`: a layer that turns RoPE, where the family leaves some out).

    Checked tensor by tensor against torch.autograd.graph.saved_tensors_hooks on real transformers
    models (tests/planner/test_activations.py).
    """
    b = t.precision.element_bytes
    h, q, kv, i = a.hidden_size, a.q_dim, a.kv_dim, a.intermediate_size
    full = t.method in (Method.FULL, Method.FREEZE)
    flash_like = t.attention in (Attention.SDPA, Attention.FLASH)

    patched = liger.layers_patched(t)
    tune = t.recipe is Recipe.TORCHTUNE
    norms = norms_per_layer(a) * _norm_bytes(a, b, full, patched, tune) + \
        _head_norms_bytes(a, b, full, liger_norm=patched)
    m = a.latent_attention
    if m is not None:
        norms += _latent_norms_bytes(a, b, full)
    if a.family in (Family.PHI, Family.STARCODER2) and a.residual_dropout:
        norms += 2 * k.DROPOUT_MASK_BYTES * h  # the residual dropout on the attention and MLP outputs keeps its mask
    groups = linear_groups(a, t, dense)
    shared_experts_moe = a.family in SHARED_EXPERTS_MOE
    linears = sum(group_input_bytes(g, t, split) for g in groups) + int8_stash_bytes(t, split, groups, True)

    heads = a.num_attention_heads
    if flash_like:
        # q and k after RoPE, v (a view: it keeps the whole fused qkv output alive in Phi-3, and latent attention's
        # expanded key parts and values), the output (o_proj reads it through a view) and the fp32 log-sum-exp per
        # head. transformers passes k/v unrepeated (enable_gqa) when there is no padding mask.
        v_storage = q + 2 * kv if a.family is Family.PHI3 else \
            heads * (m.qk_nope_head_dim + m.v_head_dim) if m else kv
        # torchtune's attention expands k and v to every head before SDPA (MultiHeadAttention: expand + flatten), as
        # transformers' did before 4.54 (repeat_kv)
        expanded = tune or recipes.repeats_kv(t)
        k_width = q if expanded else kv
        v_storage = q if expanded else v_storage
        core = b * (q + k_width) + b * v_storage + b * a.v_dim + 4 * heads
    else:
        # q, k and v repeated to every head, the fp32 softmax and (below fp32) its cast back; Gemma 2's
        # logit soft-capping saves its tanh output. The output's transpose().contiguous() copy is the o_proj
        # input counted above. Without grouped heads repeat_kv returns v itself, and with one sequence matmul folds
        # the batch into a view of it: in Phi-3 a slice that keeps the whole fused qkv output alive.
        cast = b if b != 4 else 0
        softcap = b if a.family is Family.GEMMA2 else 0
        one_sequence = t.sequences_per_micro_batch == 1
        v_storage = q + 2 * kv if a.family is Family.PHI3 and kv == q and one_sequence else a.v_dim
        # dropout on the probabilities (StarCoder2) keeps its mask, and the matmul saves the dropped copy in place
        # of the cast (a new tensor in fp32 too)
        probs = b + k.DROPOUT_MASK_BYTES if a.attention_dropout else cast
        core = b * (2 * q + v_storage) + (4 + probs + softcap) * heads * seq_len
        if a.family is Family.GPT_OSS:
            # gpt-oss appends a sink column and subtracts the row maximum (its int64 index saved) before a softmax
            # in the activations' dtype, which keeps its output; the weights are a view of it
            core = b * (2 * q + v_storage) + 8 * heads + b * heads * (seq_len + 1)

    if a.family is Family.LLAMA4 and rope and a.qk_norm:
        # its q/k L2 norm over each head after RoPE (no weight): the fp32 upcast and the fp32 rstd per head
        norms += 4 * (q + kv) + 4 * (a.num_attention_heads + a.num_key_value_heads)

    mlp: float
    if a.family is Family.LLAMA4:
        mlp = _llama4_feed_forward_bytes(a, b, full, dense)
    elif a.family is Family.GPT_OSS:
        # per routed token-expert pair: the biased gate/up output, its clamped gate, the sigmoid, up + 1 and their
        # product (modeling_gpt_oss: _apply_gate), the biased down output, the routing weight (the activations' dtype,
        # softmax over the top-k logits) and three int64 permutations; trained experts save their inputs and the
        # gather index of their biases. Per token the top-k indices and the softmax; a trained router its input.
        top_k = a.experts_per_token
        mlp = top_k * (2 * b * i + 4 * b * i + b * h + b + 3 * 8) + top_k * 8 + b * top_k
        if full:
            mlp += top_k * (b * h + b * i + 8) + b * h
    elif dense:
        mlp = 3 * b * a.dense_intermediate_size  # as a Llama MLP's
    elif a.num_experts:
        # transformers' grouped_mm experts (integrations/moe.py): per routed token-expert pair the gate/up output
        # (the gate's view keeps all of it), the activation and the down output (for the routing-weight multiply),
        # three int64 permutations, the routing weight (fp32; Qwen2/3-MoE cast it to the activations' dtype); per
        # token the router's fp32 softmax, its top-k indices (int64) and, where the weights are normalised
        # (Mixtral always, Qwen3-MoE as it ships, not Qwen2-MoE: norm_topk_prob), the top-k values and their sum
        # (fp32). DeepSeek-V3's sigmoid router holds the same (its fp32 scores, the top-k indices its gather saves,
        # the normalisation's values and sum); what its group-limited choice saves is freed with the choice, which
        # needs no gradient. Trained experts also save the grouped matmuls' inputs, and a trained router its input
        # (which a shared expert's group counts; DeepSeek-V3's router reads an fp32 copy).
        e, top_k = a.num_experts, a.experts_per_token
        weight = b if a.family in (Family.QWEN3_MOE, Family.QWEN2_MOE) else 4
        normalised = top_k * 4 + 4 if a.family not in (Family.QWEN2_MOE, Family.DEEPSEEK_V2) else 0
        # DeepSeek-V2's group-limited choice masks the softmax it takes the weights from: the mask stays
        group_mask = e if a.group_limited_routing else 0
        mlp = top_k * (3 * b * i + b * h + 3 * 8 + weight) + 4 * e + top_k * 8 + normalised + group_mask
        if full:
            # (DeepSeek's fp32 copy of its input is the input itself in fp32, which the shared experts save)
            router_input = (4 * h if b != 4 else 0) if shared_experts_moe else \
                0 if a.shared_expert_intermediate_size else b * h
            mlp += top_k * (b * h + b * i) + router_input
        if shared_experts_moe:
            mlp += 3 * b * a.shared_expert_intermediate_size  # the shared experts: a Llama MLP's
        elif a.shared_expert_intermediate_size:
            # its MLP (activation input and output, up output), the gate's sigmoid output and the shared output
            # (the gate multiply saves both)
            mlp += 3 * b * a.shared_expert_intermediate_size + b + b * h
    elif a.family is Family.STARCODER2:
        mlp = b * i  # gelu_pytorch_tanh saves its input; its output is c_proj's input
    elif a.family not in (Family.GPT2, Family.PHI):
        mlp = gated_mlp_saved_bytes(a, t, tokens=1)  # act input (gate output), act output, up output; Liger's: 2
    else:
        mlp = 4 * b * i  # gelu_new (GPT-2, Phi) saves its input, the tanh output and both product operands
    return norms + linears + core + mlp


def _llama4_feed_forward_bytes(a: Architecture, b: int, full: bool, dense: bool) -> float:
    """Llama 4's feed-forward per token (modeling_llama4: Llama4TextMoe, Llama4TextExperts, Llama4Router): a dense
    layer's MLP as a Llama MLP's. A sparse layer computes every expert for every token: the router's top-k indices
    (int64) and its fp32 sigmoid over every expert's score; the input repeated once per expert and the scores as a
    column, which their multiply saves; the batched gate/up output (the gate's view keeps all of it) and the
    activation; the shared expert as a Llama MLP. Trained experts also save the two batched matmuls' inputs (the
    scaled input and the activated product)."""
    if dense:
        return 3 * b * a.dense_intermediate_size
    e, h, i, top_k = a.num_experts, a.hidden_size, a.intermediate_size, a.experts_per_token
    routed = 8 * top_k + 4 * e + b * e * h + b * e + b * e * 2 * i + b * e * i
    if full:
        routed += b * e * h + b * e * i
    return routed + 3 * b * i


def _decoder_layer_fixed_bytes(a: Architecture, dense: bool = False) -> int:
    """Per-layer bytes independent of the batch: Gemma's norms (Gemma 3's q/k norms too, over a head) multiply by
    (1 + weight) in fp32, a new vector per norm that the multiply saves; a mixture of experts' int32 group
    offsets (and DeepSeek-V3's fp32 router weight copy)."""
    gemma = 0
    if a.family in _GEMMA_NORMS:
        rows_q, rows_k = qk_norm_rows(a)
        head_norms = a.q_dim // rows_q + a.kv_dim // rows_k if rows_q else 0
        gemma = 4 * (norms_per_layer(a) * a.hidden_size + head_norms)
    if dense or not a.num_experts or a.family is Family.LLAMA4:  # Llama 4's experts are batched matmuls
        return gemma
    # DeepSeek-V3's and GLM-4.5's routers multiply in fp32: the weight, cast to bf16 with the model by DeepSpeed, is
    # copied to fp32 at each forward, and the linear saves that copy
    router_copy = 4 * a.num_experts * a.hidden_size if a.family in SHARED_EXPERTS_MOE else 0
    return gemma + 4 * a.num_experts + router_copy


def decoder_layer_saved_bytes(a: Architecture, t: TrainingSpec, split: ParameterSplit, tokens: int,
                              dense: bool = False, rope: bool = True) -> int:
    """What one trained decoder layer saves for backward for a micro-batch of `tokens` tokens (`dense`: one of the
    dense layers of a mixture of experts; `rope`: whether it turns RoPE). Llama 4's layers without RoPE scale their
    queries by an fp32 factor per position, which the multiply saves."""
    per_token = _decoder_layer_bytes_per_token(a, t, split, t.sequence_length, dense, rope)
    temperature = 4 * t.sequence_length if a.family is Family.LLAMA4 and not rope else 0
    tune = torchtune.layer_fixed_bytes(a, t) if t.recipe is Recipe.TORCHTUNE else 0
    return int(per_token * tokens + _decoder_layer_fixed_bytes(a, dense) + temperature + tune)


def layers_saved_bytes(a: Architecture, t: TrainingSpec, split: ParameterSplit, tokens: int) -> tuple[int, int]:
    """(all trained layers', the largest layer's) saved bytes: the trained layers are the last ones, so the sparse
    layers come first when dense ones lead a mixture of experts; Llama 4's interleaved kinds are counted layer by
    layer."""
    layers = split.trainable_decoder_layers
    if a.family is Family.LLAMA4:
        each = [decoder_layer_saved_bytes(a, t, split, tokens, dense=not a.is_sparse_layer(index),
                                          rope=a.turns_rope(index))
                for index in range(a.num_layers - layers, a.num_layers)]
        return sum(each), max(each)
    sparse = decoder_layer_saved_bytes(a, t, split, tokens)
    dense_trained = max(0, layers - a.sparse_layers) if a.dense_layers else 0
    if not dense_trained:
        return layers * sparse, sparse
    dense = decoder_layer_saved_bytes(a, t, split, tokens, dense=True)
    return (layers - dense_trained) * sparse + dense_trained * dense, max(sparse, dense)


def _vision_block_bytes_per_patch(a: Architecture, b: int) -> float:
    v = a.vision
    assert v is not None
    e, m = v.embed_dim, v.embed_dim * v.mlp_ratio
    if v.image_size:
        # SigLIP: two LayerNorms (their input, mean and rstd), q/k/v's shared input, q, k, v, the attention output
        # and out_proj's input, fc1's input, gelu_pytorch_tanh's input and fc2's input
        return 2 * (b * e + 8) + 7 * b * e + 2 * b * v.intermediate_size
    if v.intermediate_size:
        # Qwen2.5-VL: two RMSNorms (the fp32 input and rstd, the normalised input to the weight), their outputs, q/k/v,
        # the attention output and the proj input; the gated MLP as a Llama MLP's with its down input
        return 2 * (4 * e + 4 + b * e) + 7 * b * e + 4 * b * v.intermediate_size
    # Two LayerNorms (input, mean, rstd), their outputs, q/k/v, attention output and the proj
    # input, then fc1 output, QuickGELU's sigmoid and the fc2 input.
    return 10 * b * e + 16 + 3 * b * m


def logits_bytes(a: Architecture, t: TrainingSpec, tokens: int) -> int:
    """Peak bytes of the logits/loss, at the first op of the loss backward: log_softmax's saved fp32 output, its
    gradient and the gradient of its input. The model's own (bf16) logits and their fp32 upcast are freed by
    then: the executor keeps only the loss of the model output (objective.Sft), and neither is saved for backward
    (simulated: benchmarks/simulate.py, peak at _log_softmax_backward_data)."""
    b = t.precision.element_bytes
    if recipes.fused_head(t):
        return recipes.fused_head_backward_bytes(a, t)
    if liger.fused_loss(t):
        return liger.fused_loss_saved_bytes(a, t, tokens) + liger.fused_loss_forward_bytes(a, t, tokens)
    if t.recipe is Recipe.TORCHTUNE:
        return torchtune.loss_bytes(a, t)
    if t.objective is Objective.DPO:  # chosen and rejected rows; the last position of each has no next token
        return (tokens - t.sequences_per_micro_batch) * a.vocab_size * k.DPO_LOGITS_FP32_COPIES * 4
    fp32_copies = k.LOGITS_FP32_COPIES * 4
    if t.loss is Loss.CHUNKED:
        return int(min(tokens, k.CHUNKED_LOSS_TOKENS) * a.vocab_size * (b + fp32_copies))
    return int(tokens * a.vocab_size * fp32_copies)


def _eager_softmax_saved_bytes(a: Architecture, t: TrainingSpec, tokens: int) -> int:
    """What eager attention saves of the softmax per layer: its fp32 output and, below fp32, the cast back."""
    if t.attention is not Attention.EAGER:
        return 0
    cast = t.precision.element_bytes if t.precision.element_bytes != 4 else 0
    return (4 + cast) * a.num_attention_heads * t.sequence_length * tokens


def _eager_softmax_backward_bytes(a: Architecture, t: TrainingSpec, tokens: int) -> int:
    """Eager attention's softmax backward: the saved fp32 probabilities, the fp32 upcast of their gradient and the
    gradient of the scores alive together, 3 x 4 bytes per head and query-key pair (simulated:
    benchmarks/simulate.py, peak at _softmax_backward_data in a recomputed layer)."""
    if t.attention is not Attention.EAGER:
        return 0
    return k.EAGER_SOFTMAX_BACKWARD_FP32_COPIES * 4 * a.num_attention_heads * t.sequence_length * tokens


def _log_prob_bytes(a: Architecture, t: TrainingSpec, tokens: int) -> int:
    """cross_entropy's saved fp32 log_softmax output (chunked losses hold one chunk at a time); what TRL's fused head
    saves instead."""
    if recipes.fused_head(t):
        return recipes.fused_head_saved_bytes(a, t)
    if liger.fused_loss(t):
        return liger.fused_loss_saved_bytes(a, t, tokens)
    rows = min(tokens, k.CHUNKED_LOSS_TOKENS) if t.loss is Loss.CHUNKED else tokens
    return rows * a.vocab_size * 4


def _outside_layers_bytes(a: Architecture, t: TrainingSpec, split: ParameterSplit, tokens: int) -> float:
    """Saved outside the decoder layers, the log-probs aside: labels (int64), RoPE cos/sin, the final norm,
    lm_head's input when lm_head trains, and Gemma 2's final soft-capping tanh.

    With trainable embeddings the embedding saves the token ids (and Gemma its scale). With frozen ones the
    first layer's input needs no gradient, so (without checkpointing) its input norm saves nothing and its
    q/k/v adapters' dropouts keep no mask."""
    b, h = t.precision.element_bytes, a.hidden_size
    full = t.method in (Method.FULL, Method.FREEZE)
    embeddings_train = t.method is Method.FULL
    gemma = a.family in _GEMMA_NORMS
    fused_loss, patched = liger.fused_loss(t), liger.layers_patched(t)
    tune = t.recipe is Recipe.TORCHTUNE
    # the token ids where the embeddings train; the labels the loss saves (Liger's fused loss saves none)
    ids = (embeddings_train + (not fused_loss)) * k.TOKEN_ID_BYTES * tokens
    if t.sequences_per_micro_batch == 1 and not fused_loss and not tune:
        # the loss pads the labels by one and shifts them with a slice, which .contiguous() copies except for a
        # single sequence, whose slice is contiguous already: the padded tensor is what stays
        ids += k.TOKEN_ID_BYTES
    # RoPE's cos and sin, in the activations' dtype (OLMo 2 keeps them in fp32); DeepSeek-V2 turns q and k by one
    # complex64 factor per pair of dimensions (apply_rotary_emb: the multiply saves it)
    rope_bytes = 4 if a.family is Family.OLMO2 else b
    # gpt-oss's cos and sin cover half a head (each turns one half against the other)
    rotary = a.resolved_rotary_dims // 2 if a.family is Family.GPT_OSS else a.resolved_rotary_dims
    rope = 0 if a.family is Family.GPT2 else 4 * rotary * t.sequence_length \
        if a.family in (Family.DEEPSEEK_V2, Family.LLAMA4) else 2 * rope_bytes * rotary * t.sequence_length
    if tune:  # the layers save views of torchtune's fp32 RoPE cache, a buffer built with the model
        rope = torchtune.rope_cache_bytes(a, t)
    head_input = b * h if full and not fused_loss else 0  # Liger's fused loss keeps the head's input for none
    final = (_norm_bytes(a, b, full, patched, tune) + head_input) * tokens + (4 * h if gemma else 0)
    softcap = b * a.vocab_size * tokens if a.family is Family.GEMMA2 else 0
    first_layer = 0.0
    if not embeddings_train and not t.gradient_checkpointing:
        # the first layer's input norm (OLMo 2 has none: its norms read the attention and MLP outputs)
        first_layer = 0.0 if a.family is Family.OLMO2 else \
            _norm_bytes(a, b, full, patched, tune) * tokens + (4 * h if gemma else 0)
        adapted = split.adapted_decoder_names
        if t.applies_lora_dropout:
            first_layer += sum(n in adapted for n in first_linears(a)) * k.DROPOUT_MASK_BYTES * h * tokens
        if not full:  # a projection without an adapter has an output that needs no gradient: its head norm saves none
            first_layer += _head_norms_bytes(a, b, False, "q_proj" not in adapted, "k_proj" not in adapted,
                                             patched) * tokens
            first_layer += _latent_norms_bytes(a, b, False, "q_a_proj" not in adapted,
                                               "kv_a_proj_with_mqa" not in adapted) * tokens
    scale = b if gemma and embeddings_train else 0  # Gemma multiplies embeddings by sqrt(hidden) as a tensor
    # the embeddings' dropout (StarCoder2) keeps its mask when the embeddings train
    dropout = k.DROPOUT_MASK_BYTES * h * tokens if a.embedding_dropout and embeddings_train else 0
    return ids + rope + final + softcap + scale + dropout - first_layer


def outside_layers_saved_bytes(a: Architecture, t: TrainingSpec, split: ParameterSplit, tokens: int) -> int:
    """Everything the forward saves for backward outside the decoder layers."""
    return int(_outside_layers_bytes(a, t, split, tokens) + _log_prob_bytes(a, t, tokens))


def activation_bytes(a: Architecture, t: TrainingSpec, split: ParameterSplit) -> tuple[int, int]:
    """(all saved activations including logits, the logits part) for one micro-batch on one GPU."""
    total, logits, _ = activation_terms(a, t, split)
    return total, logits


def activation_terms(a: Architecture, t: TrainingSpec, split: ParameterSplit,
                     backward_buffer_bytes: int = 0) -> tuple[int, int, int]:
    """activation_bytes and what is kept as the forward ends, before the loss: checkpointed layers' inputs (or
    every layer's saved tensors) and what is saved outside them. `backward_buffer_bytes` is held from the first
    gradient on (ZeRO 1-2's reduce buckets): beside the layers' backward, not the loss's."""
    b = t.precision.element_bytes
    tokens = t.sequences_per_micro_batch * t.sequence_length
    all_layers, per_layer = layers_saved_bytes(a, t, split, tokens)
    layers = split.trainable_decoder_layers
    h = a.hidden_size
    logits = logits_bytes(a, t, tokens)
    if liger.fused_loss(t):  # Liger's fused loss runs inside the forward, beside autocast's cached adapter casts
        logits += recipes.autocast_cache_bytes(split, t)
    outside = _outside_layers_bytes(a, t, split, tokens)  # the log-probs are part of the logits peak term
    eager = _eager_softmax_backward_bytes(a, t, tokens)
    if t.gradient_checkpointing:
        # each layer keeps its input; backward recomputes one layer at a time, and its attention backward (eager)
        # holds the softmax's fp32 S x S tensors beside what the layer saved before its scores
        if eager:
            eager += int(_before_scores_bytes_per_token(a, t, split) * tokens)
        layer = per_layer + layer_peak_extra_bytes(a, t, split, tokens)
        # 8-bit linears keep their inputs through checkpointing (int8_stash_bytes)
        kept = int8_stash_bytes(t, split, linear_groups(a, t), False) * tokens
        # recomputed from outside FSDP's units, every layer's input gradient is kept to the end of backward: at the
        # first layer's, all but its own (recipes.checkpoints_outside_fsdp_units)
        held = (layers - 1) * b * h * tokens if recipes.checkpoints_outside_fsdp_units(t) else 0
        body = layers * (b * h * tokens + kept) + max(layer + backward_buffer_bytes + held,
                                                      eager + backward_buffer_bytes + held, logits) + outside
        logits_term = 0
    else:
        body = all_layers + outside
        # the last layer's softmax backward runs after the logits are freed, with every other layer's activations
        # alive; of its extra fp32 S x S tensors the layer already counts the saved softmax output and its cast
        # fp32 adapters: the last layer's widest adapter input cast to fp32 in its forward, before the head runs,
        # beside autocast's cached bf16 copies of the adapters
        cast = recipes.adapter_cast_bytes(t, split, tokens) - head_saved_bytes(a, t)
        if cast > 0:
            cast += recipes.autocast_cache_bytes(split, t)
        logits_term = max(logits, eager - _eager_softmax_saved_bytes(a, t, tokens) + backward_buffer_bytes, cast,
                          backward_buffer_bytes)
    vision = 0.0
    if a.vision is not None and split.vision_trainable and t.image_tokens:
        patches = t.micro_batch_size * t.image_tokens * a.vision.spatial_merge_size ** 2
        block = _vision_block_bytes_per_patch(a, b) * patches
        vision = (a.vision.depth * b * a.vision.embed_dim * patches + block) if t.gradient_checkpointing \
            else a.vision.depth * block
    total = int(body + logits_term + vision)
    forward_end = (layers * b * h * tokens + outside) if t.gradient_checkpointing else body
    return total, logits if not t.gradient_checkpointing else int(min(logits, body)), int(forward_end + vision)

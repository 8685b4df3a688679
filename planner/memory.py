"""Per-GPU and host memory of a training step, term by term.

The model follows what PyTorch, DeepSpeed and PEFT allocate: weights by storage dtype,
adapters, gradients and optimizer states (partitioned by ZeRO stage), activations saved for
backward (per decoder layer, plus the logits/loss term), DeepSpeed buckets, the CUDA context
and the caching allocator's slack. Pure functions; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from planner import constants as k
from planner.architecture import (
    LinearLayer,
    largest_layer_params,
    linear_layers,
    lora_parameter_count,
    lora_targets,
    norms_per_layer,
    parameter_counts,
    qk_norm_rows,
)
from spec import deepspeed_config as ds
from spec.schema import (
    Architecture,
    Attention,
    Family,
    Hardware,
    LoraSpec,
    Loss,
    Method,
    ModelSpec,
    Objective,
    Offload,
    Optimizer,
    Precision,
    TrainingSpec,
)


@dataclass(frozen=True)
class MemoryBreakdown:
    weights_bytes: int
    adapter_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    logits_bytes: int
    deepspeed_buffers_bytes: int
    cuda_context_bytes: int
    allocator_bytes: int
    optimizer_step_bytes: int = 0
    # ZeRO 0-1 free the gradients at every step and backward builds them as it frees the activations; ZeRO 2-3
    # keep the gradient partition allocated across steps
    gradients_grow_in_backward: bool = False
    # The gradients alive while the step runs: all of them under ZeRO 0, the rank's reduced partition under ZeRO 1
    gradients_at_step_bytes: int = 0
    # Alive at the end of backward only: a tied embedding's second gradient and their sum (full fine-tuning)
    backward_end_bytes: int = 0
    # ZeRO-3: full copies of the parameters gathered for the module running and the prefetch, during forward and
    # backward only (released before the optimizer step)
    gathered_parameters_bytes: int = 0
    # ZeRO-3, in forward: the flat all-gather buffer of the largest module beside the copies made from it, with the
    # activations kept as forward ends (the loss not yet computed)
    fetch_buffer_bytes: int = 0
    forward_end_bytes: int = 0

    @property
    def overhead_bytes(self) -> int:
        return self.deepspeed_buffers_bytes + self.cuda_context_bytes + self.allocator_bytes

    @property
    def allocated_bytes(self) -> int:
        """What torch.cuda.max_memory_allocated would show: the total less the CUDA context and the allocator's
        slack."""
        return self.total_bytes - self.cuda_context_bytes - self.allocator_bytes

    def _after_backward_bytes(self) -> int:
        if self.gradients_grow_in_backward:
            return max(self.gradients_bytes + self.backward_end_bytes,
                       self.gradients_at_step_bytes + self.optimizer_step_bytes)
        return max(self.backward_end_bytes + self.gathered_parameters_bytes, self.optimizer_step_bytes)

    def _during_backward_bytes(self) -> int:
        """The peak while the step's forward and backward run: at the start of backward, or (ZeRO-3) while forward
        fetches its largest module."""
        return self.gathered_parameters_bytes + max(self.activations_bytes,
                                                    self.forward_end_bytes + self.fetch_buffer_bytes)

    @property
    def activations_decide_peak(self) -> bool:
        """Whether the start of backward (activations) is the peak, so a longer or bigger batch needs more."""
        return self._during_backward_bytes() >= self._after_backward_bytes()

    @property
    def total_bytes(self) -> int:
        """The peak of a step. Backward frees the activations as it builds the gradients, layer by layer: their sum
        peaks at one end — the start (activations, the logits/loss term among them) or the end (every gradient).
        The optimizer step then runs with the gradients it updates and its own transient (`optimizer_step_bytes`).
        Under ZeRO 2-3 the gradient partition is there throughout; ZeRO-3's gathered parameters are there in
        forward and backward, not in the step."""
        persistent = self.weights_bytes + self.adapter_bytes + self.optimizer_bytes + self.overhead_bytes
        return persistent + (0 if self.gradients_grow_in_backward else self.gradients_bytes) + \
            max(self._during_backward_bytes(), self._after_backward_bytes())


@dataclass(frozen=True)
class HostBreakdown:
    offloaded_optimizer_bytes: int
    offloaded_parameters_bytes: int
    model_loading_bytes: int
    process_bytes: int
    capacity_bytes: int

    @property
    def total_bytes(self) -> int:
        return (self.offloaded_optimizer_bytes + self.offloaded_parameters_bytes + self.model_loading_bytes
                + self.process_bytes)

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes


@dataclass(frozen=True)
class ParameterSplit:
    """Which parameters exist, which train, and how the base weights are stored."""

    total: int
    trainable: int
    adapter: int
    quantised: int
    lora_layers: tuple[LinearLayer, ...]
    trainable_decoder_layers: int
    vision_trainable: bool


def _quantised_bytes_per_param(method: Method, double_quant: bool) -> float:
    if method is Method.QLORA:
        absmax = (1 / k.NF4_BLOCK_SIZE + 4 / (k.NF4_BLOCK_SIZE * k.NF4_DOUBLE_QUANT_BLOCK)) if double_quant \
            else 4 / k.NF4_BLOCK_SIZE
        return 0.5 + absmax
    return float(k.INT8_BYTES_PER_PARAM)


# Keys are small: an Architecture and a LoraSpec whose target modules are de-duplicated and capped
# (spec.limits: at most 32 names of at most 256 characters), so the cache holds at most a few MB.
@lru_cache(maxsize=512)
def parameter_split(arch: Architecture, method: Method, lora: LoraSpec, train_vision_tower: bool,
                    freeze_trainable_layers: int) -> ParameterSplit:
    counts = parameter_counts(arch)
    vision_trainable = arch.vision is not None and train_vision_tower
    linear_weights = sum(layer.count * layer.in_features * layer.out_features
                         for layer in lora_targets(arch, ("all-linear",), "training.lora.target_modules"))
    expert_weights = arch.num_layers * arch.num_experts * 3 * arch.hidden_size * arch.intermediate_size
    quantised = linear_weights + expert_weights if method in (Method.QLORA, Method.LORA_8BIT) else 0
    if method.uses_adapters:
        layers = tuple(layer for layer in lora_targets(arch, lora.target_modules, "training.lora.target_modules")
                       if layer.part == "decoder" or vision_trainable)
        adapter = lora_parameter_count(layers, lora.rank)
        return ParameterSplit(counts.total, adapter, adapter, quantised, layers, arch.num_layers, vision_trainable)
    if method is Method.FREEZE:
        n = min(freeze_trainable_layers, arch.num_layers)
        return ParameterSplit(counts.total, n * counts.decoder_layer, 0, 0, (), n, False)
    trainable = counts.total - (0 if vision_trainable else counts.vision)
    return ParameterSplit(counts.total, trainable, 0, 0, (), arch.num_layers, vision_trainable)


def weight_storage_bytes(split: ParameterSplit, t: TrainingSpec) -> float:
    """Bytes of the base model's weights as stored on the GPU (whole model, unpartitioned)."""
    dense_bytes = 4 if t.precision is Precision.FP32 else 2
    if split.quantised:
        per_quantised = _quantised_bytes_per_param(t.method, t.double_quant)
        return split.quantised * per_quantised + (split.total - split.quantised) * dense_bytes
    return split.total * dense_bytes


def _optimizer_state_bytes(t: TrainingSpec) -> float:
    """Optimizer state per trainable parameter. torch optimizers keep state in the parameter's dtype, so
    pure-bf16 training (no fp32 master copy) keeps AdamW's moments in bf16 too."""
    if t.optimizer is Optimizer.SGD:
        per_fp32 = k.SGD_STATE_BYTES
    elif t.optimizer in (Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT):
        return k.ADAMW_8BIT_STATE_BYTES
    else:
        per_fp32 = k.ADAMW_STATE_BYTES
    return per_fp32 / 2 if t.precision is Precision.BF16_PURE else per_fp32


def optimizer_bytes_per_trainable_param(t: TrainingSpec) -> float:
    """Optimizer memory held across steps per trainable parameter (before ZeRO partitioning): the states, and the
    fp32 master weights under mixed precision. DeepSpeed's fp32 gradients exist only during the step
    (`optimizer_step_bytes`)."""
    master = k.FP32_MASTER_BYTES if t.precision.has_fp32_master else 0
    return _optimizer_state_bytes(t) + master


def optimizer_step_bytes(t: TrainingSpec, trainable: int, world_size: int) -> float:
    """What DeepSpeed's mixed-precision step allocates after backward has freed the activations: the fp32 copy of
    the gradients it updates and the flattened tensor it builds them into."""
    if not t.precision.has_fp32_master or t.offload is not Offload.NONE:
        return 0.0
    if t.zero_stage == 0:
        return trainable * k.ZERO0_STEP_GRAD_BYTES
    partition = trainable / world_size
    if t.zero_stage == 3:
        partition = min(partition, k.STAGE3_SUB_GROUP_ELEMENTS)
    return partition * k.ZERO_STEP_GRAD_BYTES


# Norms that multiply by their weight in fp32, so that a trained weight's multiply saves the fp32 normalised input
_FP32_WEIGHT_MULTIPLY = (Family.GEMMA, Family.GEMMA2, Family.GEMMA3, Family.OLMO2)
# Norms that multiply by (1 + weight), a new fp32 vector each call that the multiply saves
_GEMMA_NORMS = (Family.GEMMA, Family.GEMMA2, Family.GEMMA3)


def _norm_bytes(a: Architecture, b: int, weight_trains: bool) -> float:
    """Bytes one norm saves for backward, per token.

    RMSNorm upcasts its input to fp32 (saved for pow/mul) and saves the fp32 rstd; when its weight trains,
    the normalised input to the weight multiply is saved too (fp32 in Gemma, which multiplies in fp32).
    GPT-2's and Phi's LayerNorm saves its input, mean and rstd whether or not its weight trains.
    """
    h = a.hidden_size
    if a.family in (Family.GPT2, Family.PHI):
        return b * h + 8
    normalised = (4 if a.family in _FP32_WEIGHT_MULTIPLY else b) * h if weight_trains else 0
    return 4 * h + 4 + normalised


def _head_norms_bytes(a: Architecture, b: int, weight_trains: bool, q: bool = True, k: bool = True) -> float:
    """Bytes the q_norm and k_norm (qk_norm_rows: over each head, or over the whole projection) save per token: the
    fp32 upcast, the fp32 rstd per row and, when the weight trains, the normalised input to its multiply (fp32 in
    Gemma 3 and OLMo 2, which multiply in fp32), as `_norm_bytes`."""
    rows_q, rows_k = qk_norm_rows(a)
    if not rows_q:
        return 0.0
    normalised = 4 if a.family in _FP32_WEIGHT_MULTIPLY else b
    widths = [(a.q_dim, rows_q)] * q + [(a.kv_dim, rows_k)] * k
    return sum(4 * width + 4 * rows + (normalised * width if weight_trains else 0) for width, rows in widths)


def _first_linears(a: Architecture) -> tuple[str, ...]:
    """The linears that read a layer's input norm: q, k and v, and in Phi's parallel block fc1 too."""
    return ("q_proj", "k_proj", "v_proj", "fc1") if a.family is Family.PHI else _qkv_names(a)


def _qkv_names(a: Architecture) -> tuple[str, ...]:
    """The linears that read the attention input: Phi-3 fuses them into one."""
    return ("qkv_proj",) if a.family is Family.PHI3 else ("q_proj", "k_proj", "v_proj")


@dataclass(frozen=True)
class _Linear:
    names: tuple[str, ...]
    width: int
    # The input is a tensor something else already saves (the attention output for o_proj under SDPA/flash).
    input_already_saved: bool = False


def _group_input_bytes(group: _Linear, t: TrainingSpec, split: ParameterSplit) -> float:
    """Inputs saved by a group of linears that share one input tensor, and their adapters' outputs, per token."""
    b = t.precision.activation_bytes
    if t.method in (Method.FULL, Method.FREEZE):
        return 0.0 if group.input_already_saved else b * group.width
    lora_names = {layer.name for layer in split.lora_layers if layer.part == "decoder"}
    hits = sum(1 for n in group.names if n in lora_names)
    if not hits:
        return 0.0
    lora_out = hits * b * t.lora.rank  # lora_A's output, saved by lora_B
    if t.applies_lora_dropout:  # each adapter draws its own dropout: a new tensor plus its mask
        return hits * (b + k.DROPOUT_MASK_BYTES) * group.width + lora_out
    return (0.0 if group.input_already_saved else b * group.width) + lora_out


def _before_scores_bytes_per_token(a: Architecture, t: TrainingSpec, split: ParameterSplit) -> float:
    """What a recomputed layer still holds when backward reaches its eager attention scores (the MLP and the
    output projection done): its input norm, the q/k/v inputs and adapters, q/k norms, q and k (repeated) as the
    scores' matmul saves them."""
    b, full = t.precision.activation_bytes, t.method in (Method.FULL, Method.FREEZE)
    norm = 0.0 if a.family is Family.OLMO2 else _norm_bytes(a, b, full)
    qkv = _group_input_bytes(_Linear(_first_linears(a), a.hidden_size), t, split)
    return norm + _head_norms_bytes(a, b, full) + qkv + 2 * b * a.q_dim


def _decoder_layer_bytes_per_token(a: Architecture, t: TrainingSpec, split: ParameterSplit,
                                   seq_len: int) -> float:
    """Bytes one decoder layer saves for backward, per token of the micro-batch.

    Checked tensor by tensor against torch.autograd.graph.saved_tensors_hooks on real transformers
    models (tests/planner/test_activations.py).
    """
    b = t.precision.activation_bytes
    h, q, kv, i = a.hidden_size, a.q_dim, a.kv_dim, a.intermediate_size
    full = t.method in (Method.FULL, Method.FREEZE)
    flash_like = t.attention in (Attention.SDPA, Attention.FLASH)

    norms = norms_per_layer(a) * _norm_bytes(a, b, full) + _head_norms_bytes(a, b, full)
    if a.family is Family.GPT2:
        groups = [_Linear(("c_attn",), h), _Linear(("c_proj",), h, flash_like), _Linear(("c_fc",), h),
                  _Linear(("mlp.c_proj",), i)]
    elif a.family is Family.PHI:
        # one LayerNorm, whose output the attention and the MLP both read (a parallel block); each of their outputs
        # goes through the residual dropout, which keeps its mask
        norms += 2 * k.DROPOUT_MASK_BYTES * h if a.residual_dropout else 0
        groups = [_Linear(_first_linears(a), h), _Linear(("dense",), q, flash_like), _Linear(("fc2",), i)]
    else:
        qkv = _qkv_names(a)
        gate_up = ("gate_up_proj",) if a.family is Family.PHI3 else ("gate_proj", "up_proj")
        groups = [_Linear(qkv, h), _Linear(("o_proj",), q, flash_like)]
        if not a.num_experts:  # a mixture of experts' feed-forward is counted with its experts below
            groups += [_Linear(gate_up, h), _Linear(("down_proj",), i)]
        elif a.shared_expert_intermediate_size:  # Qwen2-MoE's shared expert and its gate read the MLP's input
            groups += [_Linear(("gate_proj", "up_proj", "shared_expert_gate"), h),
                       _Linear(("down_proj",), a.shared_expert_intermediate_size)]
    linears = sum(_group_input_bytes(g, t, split) for g in groups)

    heads = a.num_attention_heads
    if flash_like:
        # q and k after RoPE, v (a view: it keeps the whole fused qkv output alive in Phi-3), the output
        # (o_proj reads it through a view) and the fp32 log-sum-exp per head. transformers passes k/v
        # unrepeated (enable_gqa) when there is no padding mask.
        v_storage = q + 2 * kv if a.family is Family.PHI3 else kv
        core = b * (q + kv) + b * v_storage + b * q + 4 * heads
    else:
        # q, k and v repeated to every head, the fp32 softmax and (below fp32) its cast back; Gemma 2's
        # logit soft-capping saves its tanh output. The output's transpose().contiguous() copy is the o_proj
        # input counted above. Without grouped heads repeat_kv returns v itself, and with one sequence matmul folds
        # the batch into a view of it: in Phi-3 a slice that keeps the whole fused qkv output alive.
        cast = b if b != 4 else 0
        softcap = b if a.family is Family.GEMMA2 else 0
        one_sequence = t.sequences_per_micro_batch == 1
        v_storage = q + 2 * kv if a.family is Family.PHI3 and kv == q and one_sequence else q
        core = b * (2 * q + v_storage) + (4 + cast + softcap) * heads * seq_len

    if a.num_experts:
        # transformers' grouped_mm experts (integrations/moe.py): per routed token-expert pair the gate/up output
        # (the gate's view keeps all of it), the activation and the down output (for the routing-weight multiply),
        # three int64 permutations, the routing weight (fp32; Qwen2/3-MoE cast it to the activations' dtype); per
        # token the router's fp32 softmax, its top-k indices (int64) and, where the weights are normalised
        # (Mixtral always, Qwen3-MoE as it ships, not Qwen2-MoE: norm_topk_prob), the top-k values and their sum
        # (fp32). Trained experts also save the grouped matmuls' inputs, and a trained router its input (which a
        # shared expert's group counts).
        e, top_k = a.num_experts, a.experts_per_token
        weight = b if a.family in (Family.QWEN3_MOE, Family.QWEN2_MOE) else 4
        normalised = top_k * 4 + 4 if a.family is not Family.QWEN2_MOE else 0
        mlp: float = top_k * (3 * b * i + b * h + 3 * 8 + weight) + 4 * e + top_k * 8 + normalised
        if full:
            mlp += top_k * (b * h + b * i) + (0 if a.shared_expert_intermediate_size else b * h)
        if a.shared_expert_intermediate_size:
            # its MLP (activation input and output, up output), the gate's sigmoid output and the shared output
            # (the gate multiply saves both)
            mlp += 3 * b * a.shared_expert_intermediate_size + b + b * h
    elif a.family not in (Family.GPT2, Family.PHI):
        mlp = 3 * b * i  # act input (gate output), act output, up output; the product is down_proj's input
    else:
        mlp = 4 * b * i  # gelu_new (GPT-2, Phi) saves its input, the tanh output and both product operands
    return norms + linears + core + mlp


def _decoder_layer_fixed_bytes(a: Architecture) -> int:
    """Per-layer bytes independent of the batch: Gemma's norms (Gemma 3's q/k norms too, over a head) multiply by
    (1 + weight) in fp32, a new vector per norm that the multiply saves; a mixture of experts' int32 group
    offsets."""
    gemma = 0
    if a.family in _GEMMA_NORMS:
        rows_q, rows_k = qk_norm_rows(a)
        head_norms = a.q_dim // rows_q + a.kv_dim // rows_k if rows_q else 0
        gemma = 4 * (norms_per_layer(a) * a.hidden_size + head_norms)
    return gemma + 4 * a.num_experts


def decoder_layer_saved_bytes(a: Architecture, t: TrainingSpec, split: ParameterSplit, tokens: int) -> int:
    """What one trained decoder layer saves for backward for a micro-batch of `tokens` tokens."""
    per_token = _decoder_layer_bytes_per_token(a, t, split, t.sequence_length)
    return int(per_token * tokens + _decoder_layer_fixed_bytes(a))


def _vision_block_bytes_per_patch(a: Architecture, b: int) -> float:
    v = a.vision
    assert v is not None
    e, m = v.embed_dim, v.embed_dim * v.mlp_ratio
    # Two LayerNorms (input, mean, rstd), their outputs, q/k/v, attention output and the proj
    # input, then fc1 output, QuickGELU's sigmoid and the fc2 input.
    return 10 * b * e + 16 + 3 * b * m


def logits_bytes(a: Architecture, t: TrainingSpec, tokens: int) -> int:
    """Peak bytes of the logits/loss, at the first op of the loss backward: log_softmax's saved fp32 output, its
    gradient and the gradient of its input. The model's own (bf16) logits and their fp32 upcast are freed by
    then: the executor keeps only the loss of the model output (objective.Sft), and neither is saved for backward
    (simulated: benchmarks/simulate.py, peak at _log_softmax_backward_data)."""
    b = t.precision.activation_bytes
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
    cast = t.precision.activation_bytes if t.precision.activation_bytes != 4 else 0
    return (4 + cast) * a.num_attention_heads * t.sequence_length * tokens


def _eager_softmax_backward_bytes(a: Architecture, t: TrainingSpec, tokens: int) -> int:
    """Eager attention's softmax backward: the saved fp32 probabilities, the fp32 upcast of their gradient and the
    gradient of the scores alive together, 3 x 4 bytes per head and query-key pair (simulated:
    benchmarks/simulate.py, peak at _softmax_backward_data in a recomputed layer)."""
    if t.attention is not Attention.EAGER:
        return 0
    return k.EAGER_SOFTMAX_BACKWARD_FP32_COPIES * 4 * a.num_attention_heads * t.sequence_length * tokens


def _log_prob_bytes(a: Architecture, t: TrainingSpec, tokens: int) -> int:
    """cross_entropy's saved fp32 log_softmax output (chunked losses hold one chunk at a time)."""
    rows = min(tokens, k.CHUNKED_LOSS_TOKENS) if t.loss is Loss.CHUNKED else tokens
    return rows * a.vocab_size * 4


def _outside_layers_bytes(a: Architecture, t: TrainingSpec, split: ParameterSplit, tokens: int) -> float:
    """Saved outside the decoder layers, the log-probs aside: labels (int64), RoPE cos/sin, the final norm,
    lm_head's input when lm_head trains, and Gemma 2's final soft-capping tanh.

    With trainable embeddings the embedding saves the token ids (and Gemma its scale). With frozen ones the
    first layer's input needs no gradient, so (without checkpointing) its input norm saves nothing and its
    q/k/v adapters' dropouts keep no mask."""
    b, h = t.precision.activation_bytes, a.hidden_size
    full = t.method in (Method.FULL, Method.FREEZE)
    embeddings_train = t.method is Method.FULL
    gemma = a.family in _GEMMA_NORMS
    ids = (2 if embeddings_train else 1) * k.TOKEN_ID_BYTES * tokens
    if t.sequences_per_micro_batch == 1:
        # the loss pads the labels by one and shifts them with a slice, which .contiguous() copies except for a
        # single sequence, whose slice is contiguous already: the padded tensor is what stays
        ids += k.TOKEN_ID_BYTES
    # RoPE's cos and sin, in the activations' dtype (OLMo 2 keeps them in fp32)
    rope_bytes = 4 if a.family is Family.OLMO2 else b
    rope = 0 if a.family is Family.GPT2 else 2 * rope_bytes * a.resolved_rotary_dims * t.sequence_length
    final = (_norm_bytes(a, b, full) + (b * h if full else 0)) * tokens + (4 * h if gemma else 0)
    softcap = b * a.vocab_size * tokens if a.family is Family.GEMMA2 else 0
    first_layer = 0.0
    if not embeddings_train and not t.gradient_checkpointing:
        # the first layer's input norm (OLMo 2 has none: its norms read the attention and MLP outputs)
        first_layer = 0.0 if a.family is Family.OLMO2 else _norm_bytes(a, b, full) * tokens + (4 * h if gemma else 0)
        adapted = {layer.name for layer in split.lora_layers if layer.part == "decoder"}
        if t.applies_lora_dropout:
            first_layer += sum(n in adapted for n in _first_linears(a)) * k.DROPOUT_MASK_BYTES * h * tokens
        if not full:  # a projection without an adapter has an output that needs no gradient: its head norm saves none
            first_layer += _head_norms_bytes(a, b, False, "q_proj" not in adapted, "k_proj" not in adapted) * tokens
    scale = b if gemma and embeddings_train else 0  # Gemma multiplies embeddings by sqrt(hidden) as a tensor
    return ids + rope + final + softcap + scale - first_layer


def outside_layers_saved_bytes(a: Architecture, t: TrainingSpec, split: ParameterSplit, tokens: int) -> int:
    """Everything the forward saves for backward outside the decoder layers."""
    return int(_outside_layers_bytes(a, t, split, tokens) + _log_prob_bytes(a, t, tokens))


def activation_bytes(a: Architecture, t: TrainingSpec, split: ParameterSplit) -> tuple[int, int]:
    """(all saved activations including logits, the logits part) for one micro-batch on one GPU."""
    total, logits, _ = _activation_terms(a, t, split)
    return total, logits


def _activation_terms(a: Architecture, t: TrainingSpec, split: ParameterSplit) -> tuple[int, int, int]:
    """activation_bytes and what is kept as the forward ends, before the loss: checkpointed layers' inputs (or
    every layer's saved tensors) and what is saved outside them."""
    b = t.precision.activation_bytes
    tokens = t.sequences_per_micro_batch * t.sequence_length
    per_layer = decoder_layer_saved_bytes(a, t, split, tokens)
    layers = split.trainable_decoder_layers
    h = a.hidden_size
    logits = logits_bytes(a, t, tokens)
    outside = _outside_layers_bytes(a, t, split, tokens)  # the log-probs are part of the logits peak term
    eager = _eager_softmax_backward_bytes(a, t, tokens)
    if t.gradient_checkpointing:
        # each layer keeps its input; backward recomputes one layer at a time, and its attention backward (eager)
        # holds the softmax's fp32 S x S tensors beside what the layer saved before its scores
        if eager:
            eager += int(_before_scores_bytes_per_token(a, t, split) * tokens)
        body = layers * b * h * tokens + max(per_layer, eager, logits) + outside
        logits_term = 0
    else:
        body = layers * per_layer + outside
        # the last layer's softmax backward runs after the logits are freed, with every other layer's activations
        # alive; of its extra fp32 S x S tensors the layer already counts the saved softmax output and its cast
        logits_term = max(logits, eager - _eager_softmax_saved_bytes(a, t, tokens))
    vision = 0.0
    if a.vision is not None and split.vision_trainable and t.image_tokens:
        patches = t.micro_batch_size * t.image_tokens * a.vision.spatial_merge_size ** 2
        block = _vision_block_bytes_per_patch(a, b) * patches
        vision = (a.vision.depth * b * a.vision.embed_dim * patches + block) if t.gradient_checkpointing \
            else a.vision.depth * block
    total = int(body + logits_term + vision)
    forward_end = (layers * b * h * tokens + outside) if t.gradient_checkpointing else body
    return total, logits if not t.gradient_checkpointing else int(min(logits, body)), int(forward_end + vision)


def stage3_gathered_elements(a: Architecture, total_params: int) -> int:
    """Parameters ZeRO-3 holds gathered (full copies, beside every rank's partition) in forward and backward: up to
    stage3_max_live_parameters, or the largest module when that alone is bigger. The coordinator prefetches until
    that many are available and, from the second step on (a recorded trace), keeps what the trace marks as used
    again (partitioned_param_coordinator.fetch_sub_module, __params_to_release). Simulated: after the forward of a
    Llama-3.2-1B LoRA step on 2 ranks, 1.0e9 of its 1.24e9 parameters were gathered (8 to 12 of its 16 layers and
    the lm_head), 0.97e9 for Llama-3.1-8B (2 layers and the lm_head), 27 % and 11 % of their peaks."""
    return min(max(ds.STAGE3_MAX_LIVE_PARAMETERS, largest_layer_params(a)), total_params)


def oversized_trainable_elements(a: Architecture, split: ParameterSplit, method: Method) -> int:
    """Elements of the trainable parameters larger than the reduce bucket. ZeRO 1-2 with overlap_comm and
    contiguous_gradients copy each gradient into the bucket buffer as backward makes it and free its own storage,
    except a parameter larger than the bucket, whose gradient keeps its storage; ZeRO 1 (which does not partition
    gradients) keeps it until the step (stage_1_and_2.reduce_independent_p_g_buckets_and_remove_grads,
    reduce_ipg_grads). Adapters are never that large."""
    if method not in (Method.FULL, Method.FREEZE):
        return 0
    layers = split.trainable_decoder_layers
    sizes = [(layer.in_features * layer.out_features, layers) for layer in linear_layers(a) if layer.part == "decoder"]
    if a.num_experts:  # fused expert tensors: gate_up (E x 2I x H) and down (E x H x I) per layer
        sizes += [(a.num_experts * 2 * a.intermediate_size * a.hidden_size, layers),
                  (a.num_experts * a.hidden_size * a.intermediate_size, layers)]
    if method is Method.FULL:
        sizes += [(a.vocab_size * a.hidden_size, 1 if a.tie_word_embeddings else 2)]
    return sum(size * count for size, count in sizes if size > ds.REDUCE_BUCKET_ELEMENTS)


def _deepspeed_buffer_bytes(t: TrainingSpec, split: ParameterSplit, world_size: int) -> int:
    """Gradient reduce buckets (double-buffered with overlap_comm) and the all-gather bucket.
    ZeRO-3's parameter prefetch bucket is the gathered working set, counted under weights."""
    if t.zero_stage == 0 and world_size == 1:
        return 0
    grad_bytes = 4 if t.precision is Precision.FP32 else 2
    reduce = min(split.trainable, ds.REDUCE_BUCKET_ELEMENTS) * grad_bytes * 2
    if t.zero_stage == 3:
        return reduce
    return reduce + min(split.trainable, ds.ALLGATHER_BUCKET_ELEMENTS) * grad_bytes


def per_gpu_memory(model: ModelSpec, t: TrainingSpec, hw: Hardware) -> MemoryBreakdown:
    a = model.architecture
    split = parameter_split(a, t.method, t.lora, t.train_vision_tower, t.freeze_trainable_layers)
    n = hw.world_size
    dense_bytes = 4 if t.precision is Precision.FP32 else 2

    weights: float = weight_storage_bytes(split, t)
    if t.uses_reference_model:
        weights *= 2  # a frozen reference copy stored like the policy's base weights
    adapter: float = split.adapter * dense_bytes
    gathered = fetch_buffer = 0
    if t.zero_stage == 3:
        gathered = stage3_gathered_elements(a, split.total) * dense_bytes
        # a module's parameters are all-gathered into one flat buffer, then copied out of it param by param
        # (partition_parameters: _all_gather_dtype, AllGatherCoalescedHandle.wait: torch.cat)
        fetch_buffer = min(largest_layer_params(a), split.total) * dense_bytes
        weights = 0 if t.offload is Offload.ALL else weights / n
        adapter = adapter / n
    if t.method in (Method.FULL, Method.FREEZE):
        # the trainable weights are the model's own; report them under weights only
        adapter = 0

    grads = split.trainable * dense_bytes / (n if t.zero_stage >= 2 else 1)
    if t.zero_stage == 1 and n > 1:
        # backward moves each gradient into the reduce bucket and, once reduced, the rank's own into its partition;
        # gradients larger than the bucket keep their storage until the step
        grads = (oversized_trainable_elements(a, split, t.method) + split.trainable / n) * dense_bytes
    optimizer = split.trainable * optimizer_bytes_per_trainable_param(t) / (n if t.zero_stage >= 1 else 1)
    if t.offload is not Offload.NONE:
        optimizer = 0

    step = optimizer_step_bytes(t, split.trainable, n)
    activations, logits, forward_end = _activation_terms(a, t, split)
    buffers = _deepspeed_buffer_bytes(t, split, n)
    # DeepSpeed frees the gradients at every step under ZeRO 0-1 (simulated). bf16-pure is a recipe DeepSpeed does
    # not run (torch optimizers whose foreach step allocates temporaries as large as the gradients, which stay):
    # it keeps the additive model its third-party rows were measured with (benchmarks/accuracy.py)
    grows = t.zero_stage <= 1 and t.precision is not Precision.BF16_PURE
    # ZeRO 0's step flattens every gradient; ZeRO 1's step first frees the gradients outside the rank's partition
    # (stage_1_and_2.step: free_grad_in_param_list(params_not_in_partition)), the oversized ones among them
    at_step = grads if t.zero_stage == 0 else split.trainable * dense_bytes / n
    # a tied embedding gets two gradients (lm_head's, then the embedding lookup's) and their sum, all full-size, as
    # backward ends (simulated: Gemma 2's peak at the `add`)
    tied = 2 * a.vocab_size * a.hidden_size * dense_bytes if a.tie_word_embeddings and t.method is Method.FULL else 0
    breakdown = MemoryBreakdown(
        weights_bytes=int(weights), adapter_bytes=int(adapter), gradients_bytes=int(grads),
        optimizer_bytes=int(optimizer), activations_bytes=activations, logits_bytes=logits,
        deepspeed_buffers_bytes=buffers, cuda_context_bytes=k.CUDA_CONTEXT_BYTES, allocator_bytes=0,
        optimizer_step_bytes=int(step), gradients_grow_in_backward=grows, gradients_at_step_bytes=int(at_step),
        backward_end_bytes=tied, gathered_parameters_bytes=int(gathered), fetch_buffer_bytes=int(fetch_buffer),
        forward_end_bytes=forward_end if fetch_buffer else 0,
    )
    return replace(breakdown, allocator_bytes=int(breakdown.allocated_bytes * k.ALLOCATOR_OVERHEAD_FRACTION))


def host_memory(model: ModelSpec, t: TrainingSpec, hw: Hardware) -> HostBreakdown:
    a = model.architecture
    split = parameter_split(a, t.method, t.lora, t.train_vision_tower, t.freeze_trainable_layers)
    ranks = hw.gpus_per_node
    node_share = ranks / hw.world_size
    optimizer = 0.0
    if t.offload is not Offload.NONE:
        optimizer = split.trainable * k.HOST_OFFLOAD_OPTIMIZER_BYTES_PER_PARAM * node_share
    params = 0.0
    if t.offload is Offload.ALL:
        params = split.total * (4 if t.precision is Precision.FP32 else 2) * node_share
    load_bytes = split.total * (4 if t.precision is Precision.FP32 else 2)
    loading = min(load_bytes, k.HOST_LOADING_SHARD_BYTES) * ranks
    return HostBreakdown(
        offloaded_optimizer_bytes=int(optimizer), offloaded_parameters_bytes=int(params),
        model_loading_bytes=int(loading), process_bytes=k.HOST_PROCESS_BYTES_PER_RANK * ranks,
        capacity_bytes=hw.host_memory_bytes,
    )

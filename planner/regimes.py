"""Where a rank's share of the model and its training state live under each regime: the whole model on every rank
(ZeRO 0-2, or one GPU under a Trainer), ZeRO-3's partitions and gathers, FSDP's units; DeepSpeed's gradients and
optimizer states by ZeRO stage, or a Trainer's. planner.memory adds what a step allocates on top. Pure functions; no
I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.model import Architecture, Family
from contract.schema import Method, Offload, Optimizer, Precision, TrainingSpec
from planner import constants as k
from planner import recipes
from planner.architecture import SHARED_EXPERTS_MOE, layer_expert_params, linear_layers, parameter_counts
from planner.parameters import ParameterSplit, quantisation_constant_bytes, weight_storage_bytes
from planner.trainer_deepspeed import Buckets


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


def optimizer_step_bytes(t: TrainingSpec, trainable: int, world_size: int, largest_trainable: int = 0) -> float:
    """What DeepSpeed's mixed-precision step allocates after backward has freed the activations: the fp32 copy of
    the gradients it updates and the flattened tensor it builds them into. Under ZeRO 1-2 the gradient norm comes
    first, casting each gradient in the rank's partition to fp64 in turn (stage_1_and_2.get_grad_norm_direct,
    zero.utils.get_norm_dtype): the largest trainable tensor's share of the partition, 8 bytes an element
    (simulated: Llama-3.2-1B full on 4 ranks, its tied embedding, peaks there)."""
    if not t.precision.has_fp32_master or t.offload is not Offload.NONE:
        return 0.0
    if t.zero_stage == 0:
        return trainable * k.ZERO0_STEP_GRAD_BYTES
    partition = trainable / world_size
    if t.zero_stage == 3:
        return min(partition, k.STAGE3_SUB_GROUP_ELEMENTS) * recipes.zero_step_bytes_per_element(t)
    norm = min(largest_trainable, partition) * k.GRAD_NORM_BYTES
    return max(partition * recipes.zero_step_bytes_per_element(t), norm)


def zero3_elements(a: Architecture, split: ParameterSplit, t: TrainingSpec) -> tuple[int, int]:
    """DeepSpeed's elements of the whole model and of its largest module under ZeRO-3: a 4-bit weight is partitioned
    and gathered as its packed storage, which bitsandbytes stores in bf16 (four weights an element; DeepSpeed casts
    every other parameter, fp32 ones included, to bf16 as it partitions them). Held to: simulate.csv's row
    'Llama-3.2-1B qlora[all-linear] mb1x2048 ckpt sdpa z3 x2'."""
    counts = parameter_counts(a)
    per_weight = k.NF4_PACKED_BYTES_PER_PARAM / 2 if t.method is Method.QLORA else 1
    layer_quantised = split.quantised // a.num_layers
    layer = counts.decoder_layer - layer_quantised + int(layer_quantised * per_weight)
    total = split.total - split.quantised + int(split.quantised * per_weight)
    return total, max(layer, counts.embedding, counts.lm_head)


def stage3_gathered_elements(total_elements: int, largest_module_elements: int, b: Buckets) -> int:
    """Elements ZeRO-3 holds gathered (full copies, beside every rank's partition) in forward and backward: up to
    stage3_max_live_parameters, or the largest module when that alone is bigger (`zero3_elements`). The coordinator
    prefetches until that many are available and, from the second step on (a recorded trace), keeps what the trace
    marks as used again (partitioned_param_coordinator.fetch_sub_module, __params_to_release). Held to: simulate.csv's
    ZeRO-3 rows on several ranks (make bench-simulate), 'Llama-3.2-1B lora[all-linear] mb1x2048 ckpt sdpa z3 x2'
    among them, where the gathered parameters are a quarter of the peak."""
    return min(max(b.max_live_parameters, largest_module_elements), total_elements)


def experts_released_between_uses(a: Architecture, t: TrainingSpec, b: Buckets) -> bool:
    """Whether ZeRO-3 releases a layer's experts between their forward and their backward: they outgrow
    stage3_max_live_parameters and a shared expert runs after them, whose fetch (the first of backward) finds too
    many parameters live. Experts that end their layer (Mixtral, Qwen3-MoE, gpt-oss) are reused by backward at once
    and stay (held to: simulate.csv's rows 'Mixtral-8x7B-v0.1 lora[all-linear] mb1x4096 ckpt sdpa z3 x8' and
    'Mixtral-8x7B-v0.1 full mb1x2048 ckpt sdpa z3 x8', 1.4e9 expert parameters a layer)."""
    shared_after = a.family in (*SHARED_EXPERTS_MOE, Family.LLAMA4) or (a.family is Family.QWEN2_MOE and
                                                                        a.shared_expert_intermediate_size > 0)
    return t.zero_stage == 3 and layer_expert_params(a) > b.max_live_parameters and shared_after


def regathered_experts_bytes(a: Architecture, t: TrainingSpec, b: Buckets, dense_bytes: int) -> int:
    """transformers' fused experts (grouped_mm) save their gathered weights for backward themselves — DeepSpeed's
    linear wrapper, which saves the parameter rather than its gathered storage, does not cover them. Where ZeRO-3
    releases the experts between uses (`experts_released_between_uses`), backward gathers them again through a flat
    buffer the size of the largest expert tensor while the copy the forward saved is still held: one layer's under
    checkpointing (the recomputed one), every sparse layer's without it: the layer's gate-up and down tensors twice
    and the gate-up buffer live at the backward's `cat` (simulate.csv's rows 'GLM-4.5-Air lora[all-linear] mb1x2048
    ckpt eager z3 x8' and, without checkpointing, '... mb1x256 eager z3 x8'). Llama 4's experts are batched matmuls,
    which save the parameter itself: backward gathers them again through one flat buffer of the layer's expert
    tensors, and no copy is held (the buffer beside the copies out of it: 'Llama-4-Scout-17B-16E lora[all-linear]
    mb1x2048 ckpt sdpa z3 x8')."""
    if not experts_released_between_uses(a, t, b):
        return 0
    if a.family is Family.LLAMA4:
        return layer_expert_params(a) * dense_bytes
    held = 1 if t.gradient_checkpointing else a.sparse_layers
    return (held * layer_expert_params(a) + 2 * a.num_experts * a.intermediate_size * a.hidden_size) * dense_bytes


def oversized_trainable_elements(a: Architecture, split: ParameterSplit, method: Method, b: Buckets) -> int:
    """Elements of the trainable parameters larger than the reduce bucket. ZeRO 1-2 with overlap_comm and
    contiguous_gradients copy each gradient into the bucket buffer as backward makes it and free its own storage,
    except a parameter larger than the bucket, whose gradient keeps its storage; ZeRO 1 (which does not partition
    gradients) keeps it until the step (stage_1_and_2.reduce_independent_p_g_buckets_and_remove_grads,
    reduce_ipg_grads). Adapters are never that large."""
    return sum(size * count for size, count in _trained_tensor_sizes(a, split, method) if size > b.reduce_elements)


def largest_trained_tensor(a: Architecture, split: ParameterSplit, method: Method) -> int:
    """Elements of the largest trained weight of a full or partial fine-tune (0 for adapters, never large)."""
    return max((size for size, _ in _trained_tensor_sizes(a, split, method)), default=0)


def _trained_tensor_sizes(a: Architecture, split: ParameterSplit, method: Method) -> list[tuple[int, int]]:
    """(elements, how many) of a full or partial fine-tune's trained weight tensors: the decoder's linears, fused
    expert tensors and (full) the embedding and output head; none for adapters."""
    if method not in (Method.FULL, Method.FREEZE):
        return []
    layers = split.trainable_decoder_layers  # the last ones: sparse before any dense layer that leads them
    sizes = [(layer.in_features * layer.out_features, min(layer.count, layers)) for layer in linear_layers(a)
             if layer.part == "decoder"]
    if a.num_experts:  # fused expert tensors: gate_up (E x 2I x H) and down (E x H x I) per sparse layer
        sparse = min(a.sparse_layers, layers)
        sizes += [(a.num_experts * 2 * a.intermediate_size * a.hidden_size, sparse),
                  (a.num_experts * a.hidden_size * a.intermediate_size, sparse)]
    if method is Method.FULL:
        sizes += [(a.vocab_size * a.hidden_size, 1 if a.tie_word_embeddings else 2)]
    return sizes


@dataclass(frozen=True)
class Placement:
    """Where a rank's share of the model's parameters lives through a step, under one regime: what it keeps
    (weights, adapters) and what it gathers for a while (a sharded regime's units)."""

    weights_bytes: float
    adapter_bytes: float
    gathered_bytes: int = 0  # the largest set gathered at once for a forward or backward
    fetch_buffer_bytes: int = 0  # the flat buffer a gather lands in before it is copied out
    regathered_bytes: int = 0  # experts gathered again in backward (ZeRO-3)
    backward_gathered_bytes: int = 0  # a second unit gathered beside a unit's backward (FSDP's BACKWARD_PRE)


@dataclass(frozen=True)
class State:
    """A rank's share of the training state: adapters in their trained dtype where the regime keeps them apart
    (None: as the placement has them), gradients, optimizer states, and the optimizer step's temporary."""

    adapter_bytes: float | None
    gradients_bytes: float
    optimizer_bytes: float
    optimizer_step_bytes: float


def replicated_placement(split: ParameterSplit, t: TrainingSpec) -> Placement:
    """ZeRO 0-2, or one GPU under a Trainer: every rank holds the whole model (a preference-training run its frozen
    reference copy too)."""
    weights = weight_storage_bytes(split, t) + recipes.upcast_weight_bytes(split.total, split.quantised, t)
    if t.uses_reference_model:
        weights *= 2  # a frozen reference copy stored like the policy's base weights
    return Placement(weights, split.adapter * t.precision.element_bytes)


def zero3_placement(a: Architecture, split: ParameterSplit, t: TrainingSpec, n: int, b: Buckets) -> Placement:
    """ZeRO-3 on n ranks: each holds its partition and gathers each module's parameters for its use."""
    whole = replicated_placement(split, t)
    dense_bytes = t.precision.element_bytes
    gathered = fetch_buffer = regathered = 0
    # On one rank the partition is the whole parameter, which DeepSpeed views in place of gathering it
    # (partition_parameters.all_gather_coalesced -> _no_gather_coalesced). Held to: simulate.csv's row
    # 'Llama-3.2-1B full mb2x2048 ckpt sdpa z3 x1' and, on an H100, gpu_measurements_h100.csv's.
    if n > 1:
        elements, largest = zero3_elements(a, split, t)
        gathered = stage3_gathered_elements(elements, largest, b) * dense_bytes
        # a module's parameters are all-gathered into one flat buffer, then copied out of it param by param
        # (partition_parameters: _all_gather_dtype, AllGatherCoalescedHandle.wait: torch.cat)
        fetch_buffer = min(largest, elements) * dense_bytes
        regathered = regathered_experts_bytes(a, t, b, dense_bytes)
    # the quantisation constants are the modules' own attributes, which DeepSpeed neither partitions nor gathers
    constants = quantisation_constant_bytes(split, t)
    weights = 0 if t.offload is Offload.ALL else (whole.weights_bytes - constants) / n + constants
    return Placement(weights, whole.adapter_bytes / n, gathered, fetch_buffer, regathered)


def fsdp_placement(a: Architecture, split: ParameterSplit, t: TrainingSpec, n: int) -> Placement:
    """FSDP under a Trainer (planner.trainer_fsdp) on n ranks: each decoder layer a unit, sharded and gathered."""
    dense_bytes = t.precision.element_bytes
    counts = parameter_counts(a)
    # a quantised layer's unit holds its packed 4-bit weights (stored as bf16) and its norms; the quantisation
    # constants are the modules' own attributes, which FSDP neither shards nor gathers (every rank holds them all)
    packed = split.quantised * k.NF4_PACKED_BYTES_PER_PARAM
    constants = quantisation_constant_bytes(split, t)
    if t.method is Method.FULL:
        weights = split.total * recipes.trained_param_bytes(t) / n
    else:
        weights = (packed + (split.total - split.quantised) * recipes.frozen_weight_bytes(t)) / n + constants
    # the root unit's bf16 parameters and one decoder layer's, gathered; a second layer's beside a layer's
    # backward (recipes.fsdp)
    layer_quantised = split.quantised // a.num_layers
    layer = int(layer_quantised * k.NF4_PACKED_BYTES_PER_PARAM + (counts.decoder_layer - layer_quantised) * dense_bytes)
    gathered = (counts.total - a.num_layers * counts.decoder_layer) * dense_bytes + layer
    backward_gathered = 0 if recipes.checkpoints_outside_fsdp_units(t) else layer
    # FSDP keeps no adapters apart: its state (trainer_state) has them
    return Placement(weights, 0, gathered, layer, 0, backward_gathered)


def trainer_state(split: ParameterSplit, t: TrainingSpec, n: int) -> State:
    """A Trainer without DeepSpeed: on one GPU, or its state sharded by FSDP on n ranks."""
    adapter, grads, optimizer, step = recipes.trainer_state_bytes(split.adapter, split.trainable, t)
    ranks = n if recipes.fsdp(t) else 1
    return State(adapter / ranks, grads / ranks, optimizer / ranks, step / ranks)


def deepspeed_state(a: Architecture, split: ParameterSplit, t: TrainingSpec, n: int, b: Buckets) -> State:
    """DeepSpeed's ZeRO 0-3 on n ranks: gradients partitioned from stage 2, optimizer states from stage 1 (none on
    the GPU when offloaded)."""
    dense_bytes = t.precision.element_bytes
    grads = split.trainable * dense_bytes / (n if t.zero_stage >= 2 else 1)
    if t.zero_stage == 1 and n > 1:
        # backward moves each gradient into the reduce bucket and, once reduced, the rank's own into its
        # partition; gradients larger than the bucket keep their storage until the step
        grads = (oversized_trainable_elements(a, split, t.method, b) + split.trainable / n) * dense_bytes
    optimizer = 0 if t.offload is not Offload.NONE else \
        split.trainable * optimizer_bytes_per_trainable_param(t) / (n if t.zero_stage >= 1 else 1)
    step = optimizer_step_bytes(t, split.trainable, n, largest_trained_tensor(a, split, t.method))
    return State(None, grads, optimizer, step)


def placement(a: Architecture, split: ParameterSplit, t: TrainingSpec, n: int, b: Buckets) -> Placement:
    """The regime's placement: ZeRO-3 under DeepSpeed, FSDP under a Trainer, else the whole model on every rank."""
    if t.zero_stage == 3 and recipes.runs_deepspeed(t):
        return zero3_placement(a, split, t, n, b)
    if recipes.fsdp(t):
        return fsdp_placement(a, split, t, n)
    return replicated_placement(split, t)

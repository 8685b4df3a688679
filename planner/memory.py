"""Per-GPU and host memory of a training step, term by term, and of loading where that is the higher peak.

The model follows what PyTorch, DeepSpeed and PEFT allocate: weights by storage dtype,
adapters, gradients and optimizer states (partitioned by ZeRO stage), activations saved for
backward (per decoder layer, plus the logits/loss term), DeepSpeed buckets, the CUDA context
and the caching allocator's slack. Pure functions; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from contract.model import Architecture, Family, ModelSpec
from contract.schema import Hardware, Method, Offload, Optimizer, Precision, Recipe, TrainingSpec
from planner import constants as k
from planner import recipes
from planner.activations import activation_terms
from planner.architecture import (
    SHARED_EXPERTS_MOE,
    layer_expert_params,
    linear_layers,
    parameter_counts,
)
from planner.loading import loading_bytes
from planner.memo import memo
from planner.parameters import ParameterSplit, parameter_split, quantisation_constant_bytes, weight_storage_bytes
from planner.trainer_deepspeed import Buckets, buckets
from planner.transient_blocks import transient_block_bytes


@dataclass(frozen=True)
class MemoryBreakdown:
    weights_bytes: int
    adapter_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    logits_bytes: int
    deepspeed_buffers_bytes: int
    # the process's device memory outside PyTorch's caching allocator: CUDA context, NCCL, loaded kernels
    cuda_context_bytes: int
    allocator_bytes: int
    optimizer_step_bytes: int = 0
    # ZeRO 0-2 free the gradients at every step (ZeRO-2 its partition, stage_1_and_2.step) and backward builds them
    # as it frees the activations; ZeRO-3 keeps its flat gradient partition allocated across steps
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
    # ZeRO-3, in backward: expert tensors gathered again beside the copies their forward saved (regathered_experts)
    regathered_bytes: int = 0
    # ZeRO 1-2: the reduce bucket, held from the first gradient to the end of backward (counted in the activations'
    # backward and at its end; kept here for the allocator's slack)
    reduce_bucket_bytes: int = 0
    # cuBLAS's workspaces, allocated through PyTorch's caching allocator (k.CUBLAS_WORKSPACE_BYTES)
    cuda_workspace_bytes: int = 0
    # the peak before the first step, while the model loads: a quantised model whole on every GPU (planner.loading)
    loading_bytes: int = 0

    @property
    def overhead_bytes(self) -> int:
        return (self.deepspeed_buffers_bytes + self.cuda_workspace_bytes + self.cuda_context_bytes
                + self.allocator_bytes)

    @property
    def allocated_bytes(self) -> int:
        """What torch.cuda.max_memory_allocated would show: the higher of a step's peak (its total less the CUDA
        context and the allocator's slack) and loading's (with cuBLAS's workspace, which the first step adds)."""
        return max(self._step_total_bytes() - self.cuda_context_bytes - self.allocator_bytes,
                   self._loading_total_bytes() - self.cuda_context_bytes)

    @property
    def loading_decides_peak(self) -> bool:
        """Whether loading, not a step, is the peak (total_bytes): a quantised model whole on the GPU above what a
        step holds once ZeRO-3 has partitioned it. Loading leaves little slack (big weights, each its own block, and
        PEFT empties the cache after its fp32 casts); cuBLAS's workspace comes with the first step, beside what
        loading left cached."""
        return self._loading_total_bytes() > self._step_total_bytes()

    def _loading_total_bytes(self) -> int:
        return self.loading_bytes + self.cuda_workspace_bytes + self.cuda_context_bytes

    def _after_backward_bytes(self) -> int:
        if self.gradients_grow_in_backward:
            return max(self.gradients_bytes + self.backward_end_bytes,
                       self.gradients_at_step_bytes + self.optimizer_step_bytes)
        return max(self.backward_end_bytes + self.gathered_parameters_bytes, self.optimizer_step_bytes)

    def _during_backward_bytes(self) -> int:
        """The peak while the step's forward and backward run: at the start of backward, or (ZeRO-3) while forward
        fetches its largest module."""
        return self.gathered_parameters_bytes + max(self.activations_bytes + self.regathered_bytes,
                                                    self.forward_end_bytes + self.fetch_buffer_bytes)

    @property
    def activations_decide_peak(self) -> bool:
        """Whether the start of backward (activations) is the peak, so a longer or bigger batch needs more."""
        return not self.loading_decides_peak and self._during_backward_bytes() >= self._after_backward_bytes()

    @property
    def total_bytes(self) -> int:
        """The peak: a step's, or loading's where that is higher (`loading_decides_peak`)."""
        return max(self._step_total_bytes(), self._loading_total_bytes())

    def _step_total_bytes(self) -> int:
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


def _deepspeed_buffer_bytes(t: TrainingSpec, split: ParameterSplit, world_size: int, b: Buckets) -> tuple[int, int]:
    """DeepSpeed's gradient buckets: (held throughout the step, held in backward only). ZeRO-3 keeps its reduce
    bucket; ZeRO 1-2 allocate theirs, reduce_bucket_size elements whatever the trainable count (double-buffered with
    overlap_comm), at the first gradient backward makes and release them as backward ends (stage_1_and_2:
    setup_buckets from process_gradients, _release_ipg_buffers in the epilogue). ZeRO-3's parameter prefetch bucket
    is the gathered working set, counted under weights. FSDP keeps none: it reduces each unit's gradients whole."""
    if (t.zero_stage == 0 and world_size == 1) or recipes.fsdp(t):
        return 0, 0
    grad_bytes = t.precision.element_bytes
    copies = 2 if b.overlap_comm else 1
    if t.zero_stage in (1, 2):
        return 0, b.reduce_elements * grad_bytes * copies
    return min(split.trainable, b.reduce_elements) * grad_bytes * copies, 0


# Entries of the per-GPU memory cache. A key is an Architecture, a TrainingSpec and a rank count: frozen values bounded
# by contract.limits (a LoRA target list at most 32 names of 256 characters, shared by every spec replaced from it),
# never request bytes; an entry (key and breakdown) is under 1 KB besides the shared key objects, so the cache holds
# at most ~8 MB. One Recommend over the catalog fills about 500.
MEMORY_CACHE_ENTRIES = 8192


def per_gpu_memory(model: ModelSpec, t: TrainingSpec, hw: Hardware) -> MemoryBreakdown:
    """The per-GPU peak of a training step, term by term (`gpu_memory`, once per shape and rank count); on a CPU host
    class (planner.data.cpus) the live tensors only, with no CUDA context, cuBLAS workspace or allocator slack."""
    peak = gpu_memory(model.architecture, t, hw.world_size)
    return replace(peak, cuda_context_bytes=0, cuda_workspace_bytes=0, allocator_bytes=0) if hw.gpu.cores else peak


def outside_allocator_bytes(t: TrainingSpec) -> int:
    """A rank's device memory outside PyTorch's allocator: the CUDA context with what a step loads, and where DeepSpeed
    runs the step, the NCCL communicators it initialises (measured on an H100, planner.constants)."""
    if recipes.fsdp(t):  # one NCCL communicator, as a DeepSpeed rank's at ZeRO 0-2 (not measured under FSDP)
        return k.DEEPSPEED_RANK_OUTSIDE_ALLOCATOR_BYTES
    if not recipes.runs_deepspeed(t):
        return k.TRAINING_OUTSIDE_ALLOCATOR_BYTES
    return k.ZERO3_RANK_OUTSIDE_ALLOCATOR_BYTES if t.zero_stage == 3 else k.DEEPSPEED_RANK_OUTSIDE_ALLOCATOR_BYTES


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


@memo(MEMORY_CACHE_ENTRIES)
def gpu_memory(a: Architecture, t: TrainingSpec, n: int) -> MemoryBreakdown:
    """`per_gpu_memory` on `n` ranks, for any GPU: the regime's placement and state, then what a step adds."""
    recipes.check(a, t, n)
    split = parameter_split(a, t.method, t.lora, t.train_vision_tower, t.freeze_trainable_layers)
    dense_bytes = t.precision.element_bytes
    b = buckets(a, t, n)
    place = placement(a, split, t, n, b)
    state = deepspeed_state(a, split, t, n, b) if recipes.runs_deepspeed(t) else trainer_state(split, t, n)
    weights, gathered, fetch_buffer = place.weights_bytes, place.gathered_bytes, place.fetch_buffer_bytes
    regathered, backward_gathered = place.regathered_bytes, place.backward_gathered_bytes
    grads, optimizer, step = state.gradients_bytes, state.optimizer_bytes, state.optimizer_step_bytes
    # the trainable weights of a full or partial fine-tune are the model's own: reported under weights only (a
    # Trainer's state counts the parameters it trains apart)
    adapter = state.adapter_bytes if state.adapter_bytes is not None else \
        0 if t.method in (Method.FULL, Method.FREEZE) else place.adapter_bytes
    stream = recipes.activation_spec(t)
    buffers, backward_buffers = _deepspeed_buffer_bytes(t, split, n, b)
    activations, logits, forward_end = activation_terms(a, stream, split, backward_buffers + backward_gathered)
    activations += recipes.head_copy_bytes(a, t)
    # DeepSpeed frees the gradients at every step under ZeRO 0-2 (simulated), so backward builds them as it frees the
    # activations — in a step's first micro-batch only: with gradient accumulation the later micro-batches start
    # their backward with every gradient of the ones before (simulated on real tensors: a tiny full fine-tune at
    # accumulation 2 peaked 18 % above accumulation 1, by its gradients). bf16-pure is a recipe DeepSpeed does not
    # run (torch optimizers whose foreach step allocates temporaries as large as the gradients, which stay): it
    # keeps the additive model its third-party rows were measured with (benchmarks/accuracy.py) — except torchtune's
    # recipes, simulated: their zero_grad(set_to_none=True) frees the gradients after every step
    grows = (t.zero_stage <= 2 or recipes.fsdp(t)) and t.gradient_accumulation_steps == 1 \
        and (t.precision is not Precision.BF16_PURE or t.recipe is Recipe.TORCHTUNE)
    # ZeRO 0's step flattens every gradient; ZeRO 1's step first frees the gradients outside the rank's partition
    # (stage_1_and_2.step: free_grad_in_param_list(params_not_in_partition)), the oversized ones among them
    # (FSDP's gradients are the sharded fp32 ones throughout)
    at_step = grads if t.zero_stage == 0 or recipes.fsdp(t) else split.trainable * dense_bytes / n
    # a tied embedding gets two gradients (lm_head's, then the embedding lookup's) and their sum, all full-size, as
    # backward ends (simulated: Gemma 2's peak at the `add`); the gradients counted above hold one of them under ZeRO
    # 0 (all of them) and ZeRO 1 when it outgrows the reduce bucket (its own storage kept), none under ZeRO-2's
    # partition (simulated: Llama-3.2-1B full under trl-sft on 4 ranks, its peak at that `add`)
    embedding = a.vocab_size * a.hidden_size
    counted = t.zero_stage == 0 or (t.zero_stage == 1 and embedding > b.reduce_elements) or t.zero_stage == 3
    tied_copies = 2 if counted else 3
    tied = tied_copies * embedding * dense_bytes if a.tie_word_embeddings and t.method is Method.FULL else 0
    breakdown = MemoryBreakdown(
        weights_bytes=int(weights), adapter_bytes=int(adapter), gradients_bytes=int(grads),
        optimizer_bytes=int(optimizer), activations_bytes=activations, logits_bytes=logits,
        deepspeed_buffers_bytes=buffers, cuda_context_bytes=outside_allocator_bytes(t), allocator_bytes=0,
        cuda_workspace_bytes=k.CUBLAS_WORKSPACE_BYTES,
        optimizer_step_bytes=int(step), gradients_grow_in_backward=grows, gradients_at_step_bytes=int(at_step),
        backward_end_bytes=tied + backward_buffers, gathered_parameters_bytes=int(gathered),
        fetch_buffer_bytes=int(fetch_buffer),
        forward_end_bytes=forward_end if fetch_buffer else 0,
        regathered_bytes=regathered, reduce_bucket_bytes=backward_buffers,
        loading_bytes=loading_bytes(a, split, t),
    )
    terms = allocator_slack_terms(breakdown, *transient_block_bytes(a, stream, split), t)
    return replace(breakdown, allocator_bytes=int(sum(c * x for c, x in zip(SLACK_PER_BYTE, terms, strict=True))))


# The allocator's slack per byte of each of allocator_slack_terms (planner/constants.py: fitted by benchmarks/slack_fit)
SLACK_PER_BYTE = (k.SLACK_PER_LOGITS_BLOCK_BYTE, k.SLACK_PER_LAYER_BYTE, k.SLACK_PER_FETCH_BUFFER_BYTE,
                  k.SLACK_PER_STEP_BYTE, k.SLACK_PER_GRADIENT_BYTE, k.SLACK_PER_DEQUANTISED_BYTE,
                  k.SLACK_PER_REDUCE_BUCKET_BYTE, k.SLACK_PER_TIED_GRADIENT_BYTE)


def allocator_slack_terms(b: MemoryBreakdown, logits_block_bytes: int, layer_bytes: int, dequantised_bytes: int,
                          t: TrainingSpec) -> tuple[int, int, int, int, int, int, int, int]:
    """The short-lived blocks behind what PyTorch's caching allocator holds reserved beyond the allocated peak:
    segments they left cached which the peak's own requests cannot reuse (a freed block serves only requests it holds
    whole, and segments never merge). One fp32 vocab-sized loss block, one layer's saved tensors, ZeRO-3's flat
    gather buffer, for a full or partial fine-tune under ZeRO 1-3 or a Trainer the optimizer step's transient and the
    gradients (their partitions and buckets come and go in sizes the activations' segments do not hold), a
    quantised model's largest dequantised weight (planner.transient_blocks), ZeRO 1-2's reduce bucket, made
    as the activations are freed and freed before the step, and a tied embedding's gradients as backward ends. Each
    weighs SLACK_PER_BYTE,
    fitted to the allocator replayed on the simulated step (make bench-simulate's reserved columns)."""
    # a full or partial fine-tune under ZeRO 1-3, or under a Trainer recipe (torch's AdamW and gradients set to None)
    trains = t.method in (Method.FULL, Method.FREEZE) and (t.zero_stage >= 1 or t.recipe is not Recipe.TUNEFLEET)
    return (logits_block_bytes, layer_bytes, b.fetch_buffer_bytes, b.optimizer_step_bytes if trains else 0,
            b.gradients_bytes if trains else 0, dequantised_bytes, b.reduce_bucket_bytes,
            b.backward_end_bytes - b.reduce_bucket_bytes)


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
        params = split.total * t.precision.element_bytes * node_share
    load_bytes = split.total * t.precision.element_bytes
    loading = min(load_bytes, k.HOST_LOADING_SHARD_BYTES) * ranks
    return HostBreakdown(
        offloaded_optimizer_bytes=int(optimizer), offloaded_parameters_bytes=int(params),
        model_loading_bytes=int(loading), process_bytes=k.HOST_PROCESS_BYTES_PER_RANK * ranks,
        capacity_bytes=hw.host_memory_bytes,
    )

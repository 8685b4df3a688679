"""Per-GPU and host memory of a training step, term by term, and of loading where that is the higher peak.

The model follows what PyTorch, DeepSpeed and PEFT allocate: weights by storage dtype,
adapters, gradients and optimizer states (partitioned by ZeRO stage), activations saved for
backward (per decoder layer, plus the logits/loss term), DeepSpeed buckets, the CUDA context
and the caching allocator's slack. Pure functions; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from contract.model import Architecture, ModelSpec
from contract.schema import Hardware, Method, Offload, Precision, Recipe, TrainingSpec
from planner import constants as k
from planner import recipes
from planner.activations import activation_terms
from planner.loading import loading_bytes
from planner.memo import memo
from planner.parameters import ParameterSplit, parameter_split
from planner.regimes import deepspeed_state, placement, trainer_state
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

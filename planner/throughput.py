"""Time per step: model FLOPs by method, achieved FLOP/s, ZeRO communication and offload."""

from __future__ import annotations

import math
from dataclasses import dataclass

from contract.model import Architecture, ModelSpec
from contract.schema import GpuSpec, Hardware, Interconnect, Method, Objective, Offload, Recipe, TrainingSpec
from planner import constants as k
from planner import recipes
from planner.architecture import linear_layers, lora_targets, norms_per_layer, parameter_counts
from planner.parameters import parameter_split


@dataclass(frozen=True)
class StepTime:
    flops_per_token: float
    model_flops_utilization: float
    compute_s: float
    communication_s: float
    offload_s: float
    tokens_per_step: int
    host_s: float  # the host's share of the step (`host_s` below): the step takes at least this long
    # a GPU works while its host launches the next kernels; a CPU host class computes on the cores that launch
    host_overlaps: bool = True

    @property
    def step_s(self) -> float:
        exposed = self.communication_s * (1 - k.COMMUNICATION_OVERLAP_FRACTION)
        if not self.host_overlaps:
            return self.compute_s + exposed + self.offload_s + self.host_s
        return max(self.compute_s + exposed + self.offload_s, self.communication_s, self.host_s)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s


def flops_per_token(model: ModelSpec, t: TrainingSpec) -> float:
    """Training FLOPs per token (Kaplan et al. 2020: 2N forward, 4N backward; attention 2·L·S·d
    forward for causal masks). Frozen weights skip their weight-gradient half of backward;
    gradient checkpointing re-runs the forward. Freezing all but the top layers keeps the frozen ones out of the
    graph (executor.training.model.prepare_model): backward and the re-run cover the lm_head and the top layers."""
    a = model.architecture
    counts = parameter_counts(a)
    # The embedding lookup is no matmul, unless it is tied and doubles as the output projection.
    matmul_params = counts.active - counts.vision - (0 if a.tie_word_embeddings else counts.embedding)
    # scores over the query/key width, their weighted sum over the value width (latent attention's differ)
    attention_fwd = a.num_layers * t.sequence_length * (a.q_dim + a.v_dim)
    split = parameter_split(a, t.method, t.lora, t.train_vision_tower, t.freeze_trainable_layers)
    forward = 2 * matmul_params + attention_fwd
    # the part of the forward that backward goes through
    through: float = forward
    if t.method is Method.FREEZE:
        head = 2 * a.vocab_size * a.hidden_size
        through = head + (forward - head) * split.trainable_decoder_layers / a.num_layers
    # backward: activation grads (1x what it goes through) plus weight grads (1x forward when all weights train)
    backward = 2 * forward if t.method is Method.FULL else through + 2 * split.trainable
    recompute = through if t.gradient_checkpointing else 0
    total = forward + backward + recompute
    if t.objective is Objective.DPO and not t.dpo.precompute_reference:
        total += forward  # reference log-probs: one extra forward without grad (precomputed: once, before step 1)
    return float(total)


def host_s(a: Architecture, t: TrainingSpec, gpu: GpuSpec) -> float:
    """What the host spends on a step's micro-steps, which the GPU's work hides only once it is longer: launches per
    decoder layer and pass and per adapted linear, and ZeRO-3's fetch and release hooks per parameter tensor
    (k.HOST_S_PER_LAYER_PASS: measured on an H100 host; less where the Trainer runs the step without DeepSpeed). A CPU
    host class carries its own measured figures (planner.data.cpus): a layer-pass's each micro-step (adapters
    included) and, once a step, a trainable parameter's (gradients and the optimizer's update)."""
    adapted = sum(layer.count for layer in lora_targets(a, t.lora.target_modules, "training.lora.target_modules")) \
        if t.method.uses_adapters else 0
    passes = 4 if t.gradient_checkpointing else 3
    once_s = 0.0
    if gpu.cores:  # a CPU host class: its own measured shares beside the FLOPs
        seconds = a.num_layers * gpu.host_s_per_layer_pass * passes
        split = parameter_split(a, t.method, t.lora, t.train_vision_tower, t.freeze_trainable_layers)
        once_s = split.trainable * gpu.host_s_per_trainable_param
    else:
        per_layer_s = k.HOST_S_PER_LAYER_PASS if recipes.runs_deepspeed(t) else k.TRAINER_HOST_S_PER_LAYER_PASS
        seconds = (a.num_layers * per_layer_s + adapted * k.HOST_S_PER_ADAPTER_PASS) * passes
    if t.zero_stage == 3:
        tensors = sum(layer.count * (2 if layer.bias else 1) for layer in linear_layers(a)) + \
            a.num_layers * norms_per_layer(a) + 2 * adapted + 1
        seconds += tensors * k.ZERO3_HOST_S_PER_TENSOR
    return seconds * t.gradient_accumulation_steps + once_s


def _link_bandwidth(hw: Hardware) -> float:
    intra = hw.gpu.interconnect_bandwidth_bytes_per_s
    if hw.nodes == 1:
        return intra
    return min(intra, hw.inter_node_bandwidth_bytes_per_s or k.DEFAULT_INTER_NODE_BYTES_PER_S)


def mfu(hw: Hardware, t: TrainingSpec) -> float:
    base = k.BASE_MFU_BY_ARCHITECTURE.get(hw.gpu.architecture, 0.3)
    tokens = t.micro_batch_size * t.sequence_length
    # small batches under-fill a GPU; a CPU host class's measured utilisation holds from its smallest runs up
    saturation = 1.0 if hw.gpu.cores else tokens / (tokens + k.MFU_HALF_SATURATION_TOKENS)
    quant = k.EXECUTOR_QLORA_MFU_FACTOR if t.method is Method.QLORA and t.recipe is Recipe.TUNEFLEET \
        else k.QUANTISED_MFU_FACTOR.get(t.method.value, 1.0)
    pcie_penalty = 0.9 if hw.gpu.interconnect is Interconnect.PCIE and hw.world_size > 1 else 1.0
    return base * saturation * quant * pcie_penalty


def step_time(model: ModelSpec, t: TrainingSpec, hw: Hardware) -> StepTime:
    a = model.architecture
    n = hw.world_size
    tokens_per_micro = t.sequences_per_micro_batch * t.sequence_length
    tokens_per_step = tokens_per_micro * t.gradient_accumulation_steps * n
    fpt = flops_per_token(model, t)
    utilisation = mfu(hw, t)
    peak = hw.gpu.peak_flops_per_s(t.precision)
    if peak <= 0:  # no fp16/bf16 path on this GPU: runs at fp32 rate
        peak = hw.gpu.fp32_flops_per_s
    compute = fpt * tokens_per_micro * t.gradient_accumulation_steps / (peak * utilisation)

    split = parameter_split(a, t.method, t.lora, t.train_vision_tower, t.freeze_trainable_layers)
    elem = t.precision.element_bytes
    ring = 2 * (n - 1) / n if n > 1 else 0.0
    grad_bytes = split.trainable * elem
    comm_bytes = 0.0
    if n > 1:
        micro_steps = t.gradient_accumulation_steps
        if t.zero_stage == 3:
            # all-gather parameters for forward and backward, reduce-scatter gradients, every micro-step
            comm_bytes = micro_steps * (ring * split.total * elem + ring / 2 * grad_bytes)
        elif t.zero_stage == 2:
            comm_bytes = micro_steps * ring / 2 * grad_bytes + ring / 2 * grad_bytes
        else:
            comm_bytes = ring * grad_bytes
    communication = comm_bytes / _link_bandwidth(hw)

    offload = 0.0
    if t.offload is not Offload.NONE:
        local = split.trainable / n
        offload = 2 * local * elem / k.OFFLOAD_PCIE_BYTES_PER_S  # gradients down, parameters up
        offload += split.trainable / hw.nodes / k.CPU_ADAM_PARAMS_PER_S  # each node steps its share on CPU
        if t.offload is Offload.ALL:
            offload += t.gradient_accumulation_steps * 2 * split.total / n * elem / k.OFFLOAD_PCIE_BYTES_PER_S
    return StepTime(fpt, utilisation, compute, communication, offload, tokens_per_step, host_s(a, t, hw.gpu),
                    host_overlaps=not hw.gpu.cores)


def total_steps(tokens_per_step: int, dataset_tokens: int, epochs: float, max_steps: int) -> int:
    if max_steps:
        return max_steps
    return max(1, math.ceil(dataset_tokens * epochs / tokens_per_step))

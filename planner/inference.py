"""Memory to serve a model rather than train it: weights, the KV cache of a batch at a context length, and the
prefill's largest transient. Pure functions; the same breakdown and verdict as a training fit."""

from __future__ import annotations

from dataclasses import dataclass, replace

from contract.errors import InvalidFieldError
from contract.limits import MAX_TOKENS_PER_MICRO_BATCH
from contract.model import ModelSpec
from contract.schema import Hardware, Method, TrainingSpec
from planner import constants as k
from planner.catalog import Catalog
from planner.confidence import band
from planner.fit import FitResult, check_margin, gib
from planner.memory import MemoryBreakdown, host_memory
from planner.parameters import parameter_split, weight_storage_bytes


@dataclass(frozen=True)
class InferenceSpec:
    batch_size: int
    context_tokens: int

    def __post_init__(self) -> None:
        if self.batch_size <= 0:
            raise InvalidFieldError("inference.batch_size", f"must be at least 1, got {self.batch_size}")
        if self.context_tokens <= 0:
            raise InvalidFieldError("inference.context_tokens", f"must be at least 1, got {self.context_tokens}")
        if self.batch_size * self.context_tokens > MAX_TOKENS_PER_MICRO_BATCH:
            raise InvalidFieldError("inference.context_tokens", f"batch {self.batch_size} × {self.context_tokens} "
                                                                f"tokens is more than {MAX_TOKENS_PER_MICRO_BATCH:,}")


def kv_cache_bytes(model: ModelSpec, t: TrainingSpec, spec: InferenceSpec) -> int:
    """Keys and values of every layer for every token of the batch, in the activations' dtype (transformers'
    DynamicCache); latent attention caches its compressed key/value latent and shared RoPE key part instead
    (modeling_deepseek_v3: cache.update while the latent is still compressed)."""
    a = model.architecture
    m = a.latent_attention
    per_token_layer = m.kv_lora_rank + m.qk_rope_head_dim if m else 2 * a.kv_dim
    return a.num_layers * per_token_layer * spec.context_tokens * spec.batch_size * t.precision.element_bytes


def _prefill_bytes(model: ModelSpec, t: TrainingSpec, spec: InferenceSpec) -> int:
    """The prefill's largest transient: one layer's MLP (gate, up and their product) over the whole prompt, and the
    fp32 logits of the last token (generate keeps only those)."""
    a, b = model.architecture, t.precision.element_bytes
    tokens = spec.batch_size * spec.context_tokens
    return 3 * b * max(a.intermediate_size, a.dense_intermediate_size) * tokens + 4 * a.vocab_size * spec.batch_size


def inference_fit(model: ModelSpec, t: TrainingSpec, hw: Hardware, catalog: Catalog, spec: InferenceSpec,
                  margin_fraction: float = 0.0) -> FitResult:
    """Weights (quantised for qlora / lora-8bit), KV cache and prefill on each GPU of the hardware (tensor-parallel
    serving splits weights and cache across them)."""
    check_margin(margin_fraction)
    a = model.architecture
    split = parameter_split(a, Method.QLORA if t.method is Method.QLORA else
                            (Method.LORA_8BIT if t.method is Method.LORA_8BIT else Method.FULL), t.lora, False, 0)
    weights = int(weight_storage_bytes(split, t))
    n = hw.world_size
    cache = kv_cache_bytes(model, t, spec) // n
    prefill = _prefill_bytes(model, t, spec) // n
    allocated = weights // n + cache + prefill
    per_gpu = MemoryBreakdown(
        weights_bytes=weights // n, adapter_bytes=0, gradients_bytes=0, optimizer_bytes=0,
        activations_bytes=cache + prefill, logits_bytes=4 * a.vocab_size * spec.batch_size // n,
        deepspeed_buffers_bytes=0, cuda_context_bytes=k.CUDA_CONTEXT_BYTES,
        allocator_bytes=int(allocated * k.ALLOCATOR_OVERHEAD_FRACTION))
    needed = int(per_gpu.total_bytes * (1 + margin_fraction))
    host = host_memory(model, TrainingSpec(method=Method.FULL, precision=t.precision), hw)
    fits = needed <= hw.gpu.memory_bytes and host.fits and hw.gpu.runs(t.precision)
    largest = 0
    per_sequence = (kv_cache_bytes(model, t, InferenceSpec(1, spec.context_tokens))
                    + _prefill_bytes(model, t, InferenceSpec(1, spec.context_tokens))) / n
    room = hw.gpu.memory_bytes / (1 + k.ALLOCATOR_OVERHEAD_FRACTION) - k.CUDA_CONTEXT_BYTES - weights / n
    if room > 0:
        largest = int(room // per_sequence)
    notes = (f"inference: KV cache {gib(cache)} per GPU for batch {spec.batch_size} × {spec.context_tokens:,} tokens "
             f"({gib(per_sequence)} a sequence); the largest batch at this context is {largest}; not simulated "
             "(the range is the training fit's)",)
    served = replace(t, micro_batch_size=spec.batch_size, sequence_length=spec.context_tokens)
    return FitResult(fits, per_gpu, host, hw.gpu.memory_bytes, largest, 0, (), notes, model, served, hw,
                     band(per_gpu, model.architecture, t), margin_fraction, inference=True)

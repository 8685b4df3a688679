"""Which parameters a method trains, and the bytes of the base weights as stored (dense or quantised).
Pure functions; no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from contract.model import Architecture
from contract.schema import LoraSpec, Method, TrainingSpec
from planner import constants as k
from planner.architecture import LinearLayer, linear_layers, lora_parameter_count, lora_targets, parameter_counts
from planner.memo import memo


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

    @property
    def decoder_lora_layers(self) -> tuple[LinearLayer, ...]:
        """The adapted linears of the decoder layers (a trained vision tower's aside)."""
        return tuple(layer for layer in self.lora_layers if layer.part == "decoder")

    @property
    def adapted_decoder_names(self) -> frozenset[str]:
        return frozenset(layer.name for layer in self.decoder_lora_layers)


def _stored_bytes_per_param(method: Method) -> float:
    """A quantised weight's own storage: NF4 packed two to a byte, or int8."""
    return k.NF4_PACKED_BYTES_PER_PARAM if method is Method.QLORA else float(k.INT8_BYTES_PER_PARAM)


def _constant_bytes_per_param(method: Method, double_quant: bool) -> float:
    """A 4-bit weight's share of its block's absmax: fp32 per block, or (nested) uint8 with an fp32 per 256 blocks."""
    if method is not Method.QLORA:
        return 0.0
    if double_quant:
        return 1 / k.NF4_BLOCK_SIZE + 4 / (k.NF4_BLOCK_SIZE * k.NF4_DOUBLE_QUANT_BLOCK)
    return 4 / k.NF4_BLOCK_SIZE


def _quantised_bytes_per_param(method: Method, double_quant: bool) -> float:
    return _stored_bytes_per_param(method) + _constant_bytes_per_param(method, double_quant)


# Keys are small: an Architecture and a LoraSpec whose target modules are de-duplicated and capped
# (contract.limits: at most 32 names of at most 256 characters), so the cache holds at most a few MB.
@memo(512)
def parameter_split(arch: Architecture, method: Method, lora: LoraSpec, train_vision_tower: bool,
                    freeze_trainable_layers: int) -> ParameterSplit:
    counts = parameter_counts(arch)
    vision_trainable = arch.vision is not None and train_vision_tower
    linear_weights = sum(layer.count * layer.in_features * layer.out_features
                         for layer in linear_layers(arch) if layer.part != "head")
    # bitsandbytes quantises nn.Linear modules only (transformers' replace_with_bnb_linear): a mixture of experts'
    # fused 3-D expert tensors (transformers 5) stay in bf16 (simulate.csv's row 'Qwen1.5-MoE-A2.7B qlora[q_proj,v_proj]
    # mb1x1024 ckpt sdpa z0 x1')
    quantised = linear_weights if method.quantises else 0
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
    dense_bytes = t.precision.element_bytes
    if split.quantised:
        per_quantised = _quantised_bytes_per_param(t.method, t.double_quant)
        return split.quantised * per_quantised + (split.total - split.quantised) * dense_bytes
    return split.total * dense_bytes


def quantisation_constant_bytes(split: ParameterSplit, t: TrainingSpec) -> float:
    """The quantised weights' constants (4-bit: the absmax of every block, nested or not): attributes of their modules,
    not parameters, so neither ZeRO-3 nor FSDP partitions them — every rank holds them all."""
    return split.quantised * _constant_bytes_per_param(t.method, t.double_quant)

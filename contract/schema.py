"""Domain objects of the planner: frozen, validated dataclasses with units in their names."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Any

from contract.errors import InvalidFieldError
from contract.limits import MAX_TOKENS_PER_MICRO_BATCH


class Family(enum.Enum):
    LLAMA = "llama"
    MISTRAL = "mistral"
    MIXTRAL = "mixtral"
    QWEN2 = "qwen2"
    QWEN2_VL = "qwen2_vl"
    QWEN3 = "qwen3"
    OLMO2 = "olmo2"
    QWEN3_MOE = "qwen3_moe"
    GEMMA3 = "gemma3_text"
    PHI = "phi"
    QWEN2_MOE = "qwen2_moe"
    GEMMA = "gemma"
    GEMMA2 = "gemma2"
    PHI3 = "phi3"
    GPT2 = "gpt2"
    STARCODER2 = "starcoder2"


class Method(enum.Enum):
    FULL = "full"
    LORA = "lora"
    QLORA = "qlora"
    LORA_8BIT = "lora-8bit"
    FREEZE = "freeze"

    @property
    def uses_adapters(self) -> bool:
        return self in (Method.LORA, Method.QLORA, Method.LORA_8BIT)


class Objective(enum.Enum):
    SFT = "sft"
    DPO = "dpo"


class Precision(enum.Enum):
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    BF16_PURE = "bf16-pure"

    @property
    def activation_bytes(self) -> int:
        return 4 if self is Precision.FP32 else 2

    @property
    def has_fp32_master(self) -> bool:
        return self in (Precision.FP16, Precision.BF16)


class Optimizer(enum.Enum):
    ADAMW = "adamw"
    ADAMW_8BIT = "adamw-8bit"
    PAGED_ADAMW_8BIT = "paged-adamw-8bit"
    SGD = "sgd"


class Offload(enum.Enum):
    NONE = "none"
    OPTIMIZER = "optimizer"
    ALL = "all"


class Attention(enum.Enum):
    EAGER = "eager"
    SDPA = "sdpa"
    FLASH = "flash"


class Recipe(enum.Enum):
    """The trainer a plan describes (training.proto: Recipe)."""

    TUNEFLEET = "tunefleet"
    HF_TRAINER = "hf-trainer"


class Loss(enum.Enum):
    STANDARD = "standard"
    CHUNKED = "chunked"


class Interconnect(enum.Enum):
    PCIE = "pcie"
    NVLINK = "nvlink"
    INFINITY_FABRIC = "infinity-fabric"


ALL_LINEAR = "all-linear"


def _positive(field_name: str, value: int | float) -> None:
    if value <= 0:
        raise InvalidFieldError(field_name, f"must be greater than 0, got {value}")


def _hash_once(self: Any) -> int:
    """Specs key the planner's caches: a frozen value is hashed once, not field by field at every lookup."""
    cached: int | None = self.__dict__.get("_hash")
    if cached is None:
        cached = hash(tuple(getattr(self, f.name) for f in fields(self)))
        object.__setattr__(self, "_hash", cached)
    return cached


def _without_hash(self: Any) -> dict[str, object]:
    """Pickled without the cached hash: string hashes differ between processes."""
    return {k: v for k, v in self.__dict__.items() if k != "_hash"}


@dataclass(frozen=True)
class VisionTower:
    """Qwen2-VL style vision encoder: patch embed, `depth` ViT blocks, a patch merger."""

    depth: int
    embed_dim: int
    num_heads: int
    mlp_ratio: int
    patch_size: int
    temporal_patch_size: int
    in_channels: int
    spatial_merge_size: int
    out_hidden_size: int

    def __post_init__(self) -> None:
        for name in ("depth", "embed_dim", "num_heads", "mlp_ratio", "patch_size",
                     "temporal_patch_size", "in_channels", "spatial_merge_size", "out_hidden_size"):
            _positive(f"model.architecture.vision.{name}", getattr(self, name))


@dataclass(frozen=True)
class Architecture:
    family: Family
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    head_dim: int = 0
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    num_experts: int = 0
    experts_per_token: int = 0
    max_position_embeddings: int = 0
    vision: VisionTower | None = None
    rotary_dims: int = 0  # dimensions of each head RoPE turns (Phi: partial_rotary_factor); 0 means all
    residual_dropout: float = 0.0  # dropout on the attention and MLP outputs while training (Phi: resid_pdrop)
    shared_expert_intermediate_size: int = 0  # a mixture of experts' always-on expert (Qwen2-MoE); 0 for none
    attention_dropout: float = 0.0  # dropout on the attention probabilities while training (StarCoder2: 0.1)
    embedding_dropout: float = 0.0  # dropout on the token embeddings while training (StarCoder2: 0.1)

    __hash__ = _hash_once
    __getstate__ = _without_hash

    def __post_init__(self) -> None:
        prefix = "model.architecture"
        for name in ("residual_dropout", "attention_dropout", "embedding_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise InvalidFieldError(f"{prefix}.{name}", f"must be in [0, 1), got {getattr(self, name)}")
        for name in ("num_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                     "num_key_value_heads", "vocab_size"):
            _positive(f"{prefix}.{name}", getattr(self, name))
        if self.head_dim == 0 and self.hidden_size % self.num_attention_heads:
            raise InvalidFieldError(
                f"{prefix}.head_dim",
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads "
                f"{self.num_attention_heads}; set head_dim explicitly",
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise InvalidFieldError(
                f"{prefix}.num_key_value_heads",
                f"num_attention_heads {self.num_attention_heads} must be a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}",
            )
        if self.num_experts and not 0 < self.experts_per_token <= self.num_experts:
            raise InvalidFieldError(
                f"{prefix}.experts_per_token",
                f"must be between 1 and num_experts ({self.num_experts}), got {self.experts_per_token}",
            )
        if self.family is Family.GPT2 and self.max_position_embeddings <= 0:
            raise InvalidFieldError(f"{prefix}.max_position_embeddings",
                                    "GPT-2 has learned positions: set n_positions")

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def resolved_rotary_dims(self) -> int:
        return self.rotary_dims or self.resolved_head_dim

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.resolved_head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.resolved_head_dim


@dataclass(frozen=True)
class ModelSpec:
    name: str
    architecture: Architecture
    weights: str = ""
    source: str = ""
    note: str = ""  # how the planner read it, when that is an approximation (shown with every answer)

    __hash__ = _hash_once
    __getstate__ = _without_hash


@dataclass(frozen=True)
class LoraSpec:
    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.05
    target_modules: tuple[str, ...] = (ALL_LINEAR,)

    def __post_init__(self) -> None:
        _positive("training.lora.rank", self.rank)
        if not 0.0 <= self.dropout < 1.0:
            raise InvalidFieldError("training.lora.dropout", f"must be in [0, 1), got {self.dropout}")
        if not self.target_modules:
            raise InvalidFieldError("training.lora.target_modules",
                                    f"name at least one module, or '{ALL_LINEAR}'")
        if ALL_LINEAR in self.target_modules and len(self.target_modules) > 1:
            raise InvalidFieldError("training.lora.target_modules",
                                    f"'{ALL_LINEAR}' already adapts every linear layer: give it alone, "
                                    "or list module names without it")


# TRL's DPOConfig.beta default (trl/trainer/dpo_config.py, TRL 1.16, the version the tests run).
DEFAULT_DPO_BETA = 0.1


@dataclass(frozen=True)
class DpoSpec:
    """The DPO loss's knobs; only precompute_reference changes memory (no reference held while training)."""

    beta: float = DEFAULT_DPO_BETA
    label_smoothing: float = 0.0
    sft_weight: float = 0.0
    precompute_reference: bool = False

    def __post_init__(self) -> None:
        if not self.beta > 0:
            raise InvalidFieldError("training.dpo.beta", f"must be above 0 (TRL's default is {DEFAULT_DPO_BETA}), "
                                                         f"got {self.beta}")
        if not 0.0 <= self.label_smoothing < 0.5:
            raise InvalidFieldError("training.dpo.label_smoothing",
                                    f"is the probability a preference is flipped: in [0, 0.5), got "
                                    f"{self.label_smoothing}")
        if self.sft_weight < 0:
            raise InvalidFieldError("training.dpo.sft_weight", f"must not be negative, got {self.sft_weight}")


@dataclass(frozen=True)
class TrainingSpec:
    method: Method = Method.LORA
    micro_batch_size: int = 1
    sequence_length: int = 2048
    gradient_accumulation_steps: int = 1
    precision: Precision = Precision.BF16
    optimizer: Optimizer = Optimizer.ADAMW
    zero_stage: int = 0
    offload: Offload = Offload.NONE
    gradient_checkpointing: bool = True
    attention: Attention = Attention.SDPA
    loss: Loss = Loss.STANDARD
    lora: LoraSpec = field(default_factory=LoraSpec)
    double_quant: bool = True
    objective: Objective = Objective.SFT
    dpo_reference_model: bool = False
    train_vision_tower: bool = False
    image_tokens: int = 0
    freeze_trainable_layers: int = 0
    dpo: DpoSpec = field(default_factory=DpoSpec)
    recipe: Recipe = Recipe.TUNEFLEET

    __hash__ = _hash_once
    __getstate__ = _without_hash

    def __post_init__(self) -> None:
        _positive("training.micro_batch_size", self.micro_batch_size)
        if self.objective is not Objective.DPO and self.dpo != DpoSpec():
            raise InvalidFieldError("training.dpo", "is set but training.objective is not dpo; set objective dpo "
                                                    "or drop training.dpo")
        _positive("training.sequence_length", self.sequence_length)
        _positive("training.gradient_accumulation_steps", self.gradient_accumulation_steps)
        if self.micro_batch_size * self.sequence_length > MAX_TOKENS_PER_MICRO_BATCH:
            raise InvalidFieldError("training.micro_batch_size",
                                    f"micro_batch_size {self.micro_batch_size} × sequence_length "
                                    f"{self.sequence_length} is more than {MAX_TOKENS_PER_MICRO_BATCH:,} tokens "
                                    "per GPU per micro-batch; use gradient accumulation for a larger batch")
        if self.zero_stage not in (0, 1, 2, 3):
            raise InvalidFieldError("training.zero_stage",
                                    f"DeepSpeed ZeRO has stages 0, 1, 2 and 3, got {self.zero_stage}")
        if self.offload is Offload.ALL and self.zero_stage != 3:
            raise InvalidFieldError("training.offload",
                                    "parameter offload needs ZeRO stage 3; use offload 'optimizer' "
                                    "or set zero_stage 3")
        if self.offload is Offload.OPTIMIZER and self.zero_stage == 0:
            raise InvalidFieldError("training.offload",
                                    "optimizer offload needs ZeRO stage 1 or higher")
        if self.image_tokens >= self.sequence_length:
            raise InvalidFieldError("training.image_tokens",
                                    f"{self.image_tokens} image tokens do not fit in sequence_length "
                                    f"{self.sequence_length}")
        if self.method is Method.FREEZE and self.freeze_trainable_layers <= 0:
            raise InvalidFieldError("training.freeze_trainable_layers",
                                    "method freeze trains the last N layers: set N > 0")
        if self.method in (Method.QLORA, Method.LORA_8BIT) and self.zero_stage == 3 and \
                self.offload is Offload.ALL:
            raise InvalidFieldError("training.offload",
                                    "quantised base weights cannot be offloaded to the CPU")

    @property
    def uses_reference_model(self) -> bool:
        """DPO needs reference log-probs: a separate copy, or the base with the adapter off; none is held while
        training when they were computed once before the first step."""
        if self.objective is not Objective.DPO or self.dpo.precompute_reference:
            return False
        return self.dpo_reference_model or not self.method.uses_adapters

    @property
    def applies_lora_dropout(self) -> bool:
        """DPO runs with dropout off (TRL's DPOConfig.disable_dropout default, which the executor follows), so its
        LoRA dropout saves no masks."""
        return self.method.uses_adapters and self.lora.dropout > 0 and self.objective is not Objective.DPO

    @property
    def sequences_per_example(self) -> int:
        return 2 if self.objective is Objective.DPO else 1

    @property
    def sequences_per_micro_batch(self) -> int:
        """The rows of one micro-batch: DPO's chosen and rejected sequences, two per example."""
        return self.micro_batch_size * self.sequences_per_example



@dataclass(frozen=True)
class GpuSpec:
    name: str
    display_name: str
    vendor: str
    architecture: str
    memory_bytes: int
    bf16_flops_per_s: float
    fp16_flops_per_s: float
    fp32_flops_per_s: float
    memory_bandwidth_bytes_per_s: float
    interconnect: Interconnect
    interconnect_bandwidth_bytes_per_s: float
    supports_bf16: bool
    spec_source: str
    host_memory_per_gpu_bytes: int
    on_demand_hourly_usd: float = 0.0
    spot_hourly_usd: float = 0.0
    price_source: str = ""
    aliases: tuple[str, ...] = ()
    # memory_bytes is what the driver reports (planner.data.usable_memory); this is the size on the box
    marketed_memory_bytes: int = 0
    memory_source: str = ""

    __hash__ = _hash_once
    __getstate__ = _without_hash

    def runs(self, precision: Precision) -> bool:
        """Whether the GPU computes in this precision: bf16 (mixed or pure) needs bf16 support (Ampere and later)."""
        return self.supports_bf16 or precision not in (Precision.BF16, Precision.BF16_PURE)

    def peak_flops_per_s(self, precision: Precision) -> float:
        if precision is Precision.FP32:
            return self.fp32_flops_per_s
        if precision is Precision.FP16:
            return self.fp16_flops_per_s
        return self.bf16_flops_per_s


@dataclass(frozen=True)
class Flavor:
    name: str
    provider: str
    gpu: str
    gpu_count: int
    host_memory_bytes: int
    vcpus: int
    hourly_usd: float
    price_source: str
    accelerator: str = "gpu"


@dataclass(frozen=True)
class Hardware:
    """Hardware with every catalog default resolved; the request's values won."""

    gpu: GpuSpec
    gpus_per_node: int = 1
    nodes: int = 1
    host_memory_bytes: int = 0
    hourly_usd_per_gpu: float = 0.0
    spot: bool = False
    provider: str = ""
    flavor: str = ""
    inter_node_bandwidth_bytes_per_s: float = 0.0
    # False: no price on record for this hardware; hourly_usd_per_gpu is 0 and means unknown, not free
    priced: bool = True

    __hash__ = _hash_once
    __getstate__ = _without_hash

    def __post_init__(self) -> None:
        _positive("hardware.gpus_per_node", self.gpus_per_node)
        _positive("hardware.nodes", self.nodes)

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.nodes


@dataclass(frozen=True)
class Workload:
    dataset_tokens: int = 0
    epochs: float = 1.0
    max_steps: int = 0

    def __post_init__(self) -> None:
        if self.dataset_tokens < 0:
            raise InvalidFieldError("workload.dataset_tokens", "must not be negative")
        if self.epochs <= 0:
            raise InvalidFieldError("workload.epochs", f"must be greater than 0, got {self.epochs}")
        if self.dataset_tokens == 0 and self.max_steps == 0:
            raise InvalidFieldError("workload.dataset_tokens",
                                    "say how much to train: set dataset_tokens (with epochs) or max_steps")

"""Domain objects of the planner: frozen, validated dataclasses with units in their names."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from contract.errors import InvalidFieldError
from contract.limits import MAX_TOKENS_PER_MICRO_BATCH
from contract.values import hash_once, positive, without_hash


class Method(enum.Enum):
    FULL = "full"
    LORA = "lora"
    QLORA = "qlora"
    LORA_8BIT = "lora-8bit"
    FREEZE = "freeze"

    @property
    def uses_adapters(self) -> bool:
        return self in (Method.LORA, Method.QLORA, Method.LORA_8BIT)

    @property
    def quantises(self) -> bool:
        """Whether the base weights load quantised by bitsandbytes (4-bit NF4 or LLM.int8)."""
        return self in (Method.QLORA, Method.LORA_8BIT)


class Objective(enum.Enum):
    SFT = "sft"
    DPO = "dpo"


class Precision(enum.Enum):
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    BF16_PURE = "bf16-pure"

    @property
    def element_bytes(self) -> int:
        """Bytes of one element in the dtype this precision computes in (activations, and the weights and gradients
        a step casts to it): fp32's 4, else 2."""
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
    TRL_SFT = "trl-sft"
    TRL_DPO = "trl-dpo"
    TORCHTUNE = "torchtune"


class Sharding(enum.Enum):
    """Which library shards a ZeRO stage above 0 (training.proto: Sharding): DeepSpeed's ZeRO (the executor's), or
    PyTorch's FSDP as accelerate runs it under a Trainer recipe (ZeRO-3 as FULL_SHARD)."""

    DEEPSPEED = "deepspeed"
    FSDP = "fsdp"


class LoadDtype(enum.Enum):
    """The dtype a Trainer recipe's script loads the model in (from_pretrained(dtype=...); training.proto:
    LoadDtype): bf16, or fp32 (PEFT's example scripts for an unquantised model; transformers 4 without a dtype)."""

    BF16 = "bf16"
    FP32 = "fp32"


class Loss(enum.Enum):
    STANDARD = "standard"
    CHUNKED = "chunked"


class Interconnect(enum.Enum):
    PCIE = "pcie"
    NVLINK = "nvlink"
    INFINITY_FABRIC = "infinity-fabric"


ALL_LINEAR = "all-linear"


@dataclass(frozen=True)
class LoraSpec:
    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.05
    target_modules: tuple[str, ...] = (ALL_LINEAR,)

    def __post_init__(self) -> None:
        positive("training.lora.rank", self.rank)
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
# a transformers release as pip names it: major.minor, then a patch and a pre-release tag if any (4.45.2, 4.52.0rc1)
_TRANSFORMERS_VERSION = re.compile(r"(\d+)\.(\d+)(\.\d+)?([.-]?[a-z]+\d*)?")


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
    sharding: Sharding = Sharding.DEEPSPEED
    load_dtype: LoadDtype = LoadDtype.BF16
    liger: bool = False
    transformers_version: str = ""

    __hash__ = hash_once
    __getstate__ = without_hash

    def __post_init__(self) -> None:
        positive("training.micro_batch_size", self.micro_batch_size)
        if self.objective is not Objective.DPO and self.dpo != DpoSpec():
            raise InvalidFieldError("training.dpo", "is set but training.objective is not dpo; set objective dpo "
                                                    "or drop training.dpo")
        positive("training.sequence_length", self.sequence_length)
        positive("training.gradient_accumulation_steps", self.gradient_accumulation_steps)
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
        if self.sharding is Sharding.FSDP and self.zero_stage != 3:
            raise InvalidFieldError("training.sharding", f"FSDP is planned as FULL_SHARD, which shards like ZeRO "
                                                         f"stage 3; set zero_stage 3, got {self.zero_stage}")
        if self.load_dtype is LoadDtype.FP32 and (self.recipe is Recipe.TUNEFLEET
                                                  or self.precision is not Precision.BF16):
            raise InvalidFieldError("training.load_dtype", "fp32 loading is a Trainer recipe's script under bf16 "
                                                           "mixed precision; the executor loads the model in the "
                                                           "plan's precision: drop load_dtype or set a Trainer recipe "
                                                           "and precision bf16")
        if self.liger and self.recipe not in (Recipe.HF_TRAINER, Recipe.TRL_SFT):
            raise InvalidFieldError("training.liger", "Liger's kernels are the Trainer's use_liger_kernel: set recipe "
                                                      f"hf-trainer or trl-sft, or drop liger (recipe "
                                                      f"{self.recipe.value})")
        if self.transformers_version:
            if not _TRANSFORMERS_VERSION.fullmatch(self.transformers_version):
                raise InvalidFieldError("training.transformers_version",
                                        f"is a transformers release such as 4.45.2 (pip show transformers), got "
                                        f"{self.transformers_version!r}")
            if self.recipe not in (Recipe.HF_TRAINER, Recipe.TRL_SFT, Recipe.TRL_DPO):
                raise InvalidFieldError("training.transformers_version",
                                        "is the release under a Trainer recipe's script: set recipe hf-trainer, "
                                        "trl-sft or trl-dpo, or drop transformers_version "
                                        f"(recipe {self.recipe.value})")
        if self.method.quantises and self.zero_stage == 3 and \
                self.offload is Offload.ALL:
            raise InvalidFieldError("training.offload",
                                    "quantised base weights cannot be offloaded to the CPU")

    @property
    def transformers_release(self) -> tuple[int, int] | None:
        """(major, minor) of transformers_version; None where unset (the release the planner is simulated with)."""
        found = _TRANSFORMERS_VERSION.fullmatch(self.transformers_version)
        return (int(found[1]), int(found[2])) if found else None

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
    def upcasts_when_loading(self) -> bool:
        """Whether PEFT's prepare_model_for_kbit_training casts a quantised model's dense parameters to fp32 as it
        loads: a Trainer's script does (LLaMA-Factory, PEFT's examples; not under FSDP, planner.recipes.fsdp), TRL's
        trainers do not, and tunefleet's executor only for an fp32 step (executor.training.model.prepare_model: under
        mixed precision DeepSpeed casts the model back to bf16 or fp16). The planner sizes what the executor does."""
        if not self.method.quantises or self.sharding is Sharding.FSDP:
            return False
        if self.recipe is Recipe.TUNEFLEET:
            return self.precision is Precision.FP32
        return self.recipe is Recipe.HF_TRAINER

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
    # A CPU host class (planner.data.cpus) trains on its cores: its own measured share of a step beside the model's
    # FLOPs — per decoder-layer pass and per trainable parameter (gradients, the optimizer's update) — and its
    # start-up; 0 for a GPU (the planner's GPU-host constants apply).
    cores: int = 0
    host_s_per_layer_pass: float = 0.0
    host_s_per_trainable_param: float = 0.0
    startup_s: float = 0.0

    __hash__ = hash_once
    __getstate__ = without_hash

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

    __hash__ = hash_once
    __getstate__ = without_hash

    def __post_init__(self) -> None:
        positive("hardware.gpus_per_node", self.gpus_per_node)
        positive("hardware.nodes", self.nodes)

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

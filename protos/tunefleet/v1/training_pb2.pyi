from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Method(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    METHOD_UNSPECIFIED: _ClassVar[Method]
    METHOD_FULL: _ClassVar[Method]
    METHOD_LORA: _ClassVar[Method]
    METHOD_QLORA: _ClassVar[Method]
    METHOD_LORA_8BIT: _ClassVar[Method]
    METHOD_FREEZE: _ClassVar[Method]

class Objective(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OBJECTIVE_UNSPECIFIED: _ClassVar[Objective]
    OBJECTIVE_SFT: _ClassVar[Objective]
    OBJECTIVE_DPO: _ClassVar[Objective]

class Precision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRECISION_UNSPECIFIED: _ClassVar[Precision]
    PRECISION_FP32: _ClassVar[Precision]
    PRECISION_FP16: _ClassVar[Precision]
    PRECISION_BF16: _ClassVar[Precision]
    PRECISION_BF16_PURE: _ClassVar[Precision]

class Optimizer(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPTIMIZER_UNSPECIFIED: _ClassVar[Optimizer]
    OPTIMIZER_ADAMW: _ClassVar[Optimizer]
    OPTIMIZER_ADAMW_8BIT: _ClassVar[Optimizer]
    OPTIMIZER_PAGED_ADAMW_8BIT: _ClassVar[Optimizer]
    OPTIMIZER_SGD: _ClassVar[Optimizer]

class Offload(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OFFLOAD_UNSPECIFIED: _ClassVar[Offload]
    OFFLOAD_NONE: _ClassVar[Offload]
    OFFLOAD_OPTIMIZER: _ClassVar[Offload]
    OFFLOAD_ALL: _ClassVar[Offload]

class Attention(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTENTION_UNSPECIFIED: _ClassVar[Attention]
    ATTENTION_EAGER: _ClassVar[Attention]
    ATTENTION_SDPA: _ClassVar[Attention]
    ATTENTION_FLASH: _ClassVar[Attention]

class Loss(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOSS_UNSPECIFIED: _ClassVar[Loss]
    LOSS_STANDARD: _ClassVar[Loss]
    LOSS_CHUNKED: _ClassVar[Loss]

class Recipe(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RECIPE_UNSPECIFIED: _ClassVar[Recipe]
    RECIPE_TUNEFLEET: _ClassVar[Recipe]
    RECIPE_HF_TRAINER: _ClassVar[Recipe]
    RECIPE_TRL_SFT: _ClassVar[Recipe]
    RECIPE_TRL_DPO: _ClassVar[Recipe]
    RECIPE_TORCHTUNE: _ClassVar[Recipe]

class Sharding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SHARDING_UNSPECIFIED: _ClassVar[Sharding]
    SHARDING_DEEPSPEED: _ClassVar[Sharding]
    SHARDING_FSDP: _ClassVar[Sharding]

class LoadDtype(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOAD_DTYPE_UNSPECIFIED: _ClassVar[LoadDtype]
    LOAD_DTYPE_BF16: _ClassVar[LoadDtype]
    LOAD_DTYPE_FP32: _ClassVar[LoadDtype]
METHOD_UNSPECIFIED: Method
METHOD_FULL: Method
METHOD_LORA: Method
METHOD_QLORA: Method
METHOD_LORA_8BIT: Method
METHOD_FREEZE: Method
OBJECTIVE_UNSPECIFIED: Objective
OBJECTIVE_SFT: Objective
OBJECTIVE_DPO: Objective
PRECISION_UNSPECIFIED: Precision
PRECISION_FP32: Precision
PRECISION_FP16: Precision
PRECISION_BF16: Precision
PRECISION_BF16_PURE: Precision
OPTIMIZER_UNSPECIFIED: Optimizer
OPTIMIZER_ADAMW: Optimizer
OPTIMIZER_ADAMW_8BIT: Optimizer
OPTIMIZER_PAGED_ADAMW_8BIT: Optimizer
OPTIMIZER_SGD: Optimizer
OFFLOAD_UNSPECIFIED: Offload
OFFLOAD_NONE: Offload
OFFLOAD_OPTIMIZER: Offload
OFFLOAD_ALL: Offload
ATTENTION_UNSPECIFIED: Attention
ATTENTION_EAGER: Attention
ATTENTION_SDPA: Attention
ATTENTION_FLASH: Attention
LOSS_UNSPECIFIED: Loss
LOSS_STANDARD: Loss
LOSS_CHUNKED: Loss
RECIPE_UNSPECIFIED: Recipe
RECIPE_TUNEFLEET: Recipe
RECIPE_HF_TRAINER: Recipe
RECIPE_TRL_SFT: Recipe
RECIPE_TRL_DPO: Recipe
RECIPE_TORCHTUNE: Recipe
SHARDING_UNSPECIFIED: Sharding
SHARDING_DEEPSPEED: Sharding
SHARDING_FSDP: Sharding
LOAD_DTYPE_UNSPECIFIED: LoadDtype
LOAD_DTYPE_BF16: LoadDtype
LOAD_DTYPE_FP32: LoadDtype

class LoraSpec(_message.Message):
    __slots__ = ("rank", "alpha", "dropout", "target_modules")
    RANK_FIELD_NUMBER: _ClassVar[int]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    DROPOUT_FIELD_NUMBER: _ClassVar[int]
    TARGET_MODULES_FIELD_NUMBER: _ClassVar[int]
    rank: int
    alpha: float
    dropout: float
    target_modules: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, rank: _Optional[int] = ..., alpha: _Optional[float] = ..., dropout: _Optional[float] = ..., target_modules: _Optional[_Iterable[str]] = ...) -> None: ...

class DpoSpec(_message.Message):
    __slots__ = ("beta", "label_smoothing", "sft_weight", "precompute_reference")
    BETA_FIELD_NUMBER: _ClassVar[int]
    LABEL_SMOOTHING_FIELD_NUMBER: _ClassVar[int]
    SFT_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    PRECOMPUTE_REFERENCE_FIELD_NUMBER: _ClassVar[int]
    beta: float
    label_smoothing: float
    sft_weight: float
    precompute_reference: bool
    def __init__(self, beta: _Optional[float] = ..., label_smoothing: _Optional[float] = ..., sft_weight: _Optional[float] = ..., precompute_reference: _Optional[bool] = ...) -> None: ...

class TrainingSpec(_message.Message):
    __slots__ = ("method", "lora", "double_quant", "precision", "optimizer", "zero_stage", "offload", "gradient_checkpointing", "attention", "loss", "micro_batch_size", "sequence_length", "gradient_accumulation_steps", "objective", "dpo_reference_model", "train_vision_tower", "image_tokens", "freeze_trainable_layers", "dpo", "recipe", "sharding", "load_dtype", "liger", "transformers_version")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    LORA_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_QUANT_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    ZERO_STAGE_FIELD_NUMBER: _ClassVar[int]
    OFFLOAD_FIELD_NUMBER: _ClassVar[int]
    GRADIENT_CHECKPOINTING_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    MICRO_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    GRADIENT_ACCUMULATION_STEPS_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    DPO_REFERENCE_MODEL_FIELD_NUMBER: _ClassVar[int]
    TRAIN_VISION_TOWER_FIELD_NUMBER: _ClassVar[int]
    IMAGE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FREEZE_TRAINABLE_LAYERS_FIELD_NUMBER: _ClassVar[int]
    DPO_FIELD_NUMBER: _ClassVar[int]
    RECIPE_FIELD_NUMBER: _ClassVar[int]
    SHARDING_FIELD_NUMBER: _ClassVar[int]
    LOAD_DTYPE_FIELD_NUMBER: _ClassVar[int]
    LIGER_FIELD_NUMBER: _ClassVar[int]
    TRANSFORMERS_VERSION_FIELD_NUMBER: _ClassVar[int]
    method: Method
    lora: LoraSpec
    double_quant: bool
    precision: Precision
    optimizer: Optimizer
    zero_stage: int
    offload: Offload
    gradient_checkpointing: bool
    attention: Attention
    loss: Loss
    micro_batch_size: int
    sequence_length: int
    gradient_accumulation_steps: int
    objective: Objective
    dpo_reference_model: bool
    train_vision_tower: bool
    image_tokens: int
    freeze_trainable_layers: int
    dpo: DpoSpec
    recipe: Recipe
    sharding: Sharding
    load_dtype: LoadDtype
    liger: bool
    transformers_version: str
    def __init__(self, method: _Optional[_Union[Method, str]] = ..., lora: _Optional[_Union[LoraSpec, _Mapping]] = ..., double_quant: _Optional[bool] = ..., precision: _Optional[_Union[Precision, str]] = ..., optimizer: _Optional[_Union[Optimizer, str]] = ..., zero_stage: _Optional[int] = ..., offload: _Optional[_Union[Offload, str]] = ..., gradient_checkpointing: _Optional[bool] = ..., attention: _Optional[_Union[Attention, str]] = ..., loss: _Optional[_Union[Loss, str]] = ..., micro_batch_size: _Optional[int] = ..., sequence_length: _Optional[int] = ..., gradient_accumulation_steps: _Optional[int] = ..., objective: _Optional[_Union[Objective, str]] = ..., dpo_reference_model: _Optional[bool] = ..., train_vision_tower: _Optional[bool] = ..., image_tokens: _Optional[int] = ..., freeze_trainable_layers: _Optional[int] = ..., dpo: _Optional[_Union[DpoSpec, _Mapping]] = ..., recipe: _Optional[_Union[Recipe, str]] = ..., sharding: _Optional[_Union[Sharding, str]] = ..., load_dtype: _Optional[_Union[LoadDtype, str]] = ..., liger: _Optional[bool] = ..., transformers_version: _Optional[str] = ...) -> None: ...

class WorkloadSpec(_message.Message):
    __slots__ = ("dataset_tokens", "epochs", "max_steps")
    DATASET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    dataset_tokens: int
    epochs: float
    max_steps: int
    def __init__(self, dataset_tokens: _Optional[int] = ..., epochs: _Optional[float] = ..., max_steps: _Optional[int] = ...) -> None: ...

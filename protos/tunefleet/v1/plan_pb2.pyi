import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from tunefleet.v1 import hardware_pb2 as _hardware_pb2
from tunefleet.v1 import model_pb2 as _model_pb2
from tunefleet.v1 import training_pb2 as _training_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DatasetFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DATASET_FORMAT_UNSPECIFIED: _ClassVar[DatasetFormat]
    DATASET_FORMAT_TEXT: _ClassVar[DatasetFormat]
    DATASET_FORMAT_INSTRUCTION: _ClassVar[DatasetFormat]
    DATASET_FORMAT_CHAT: _ClassVar[DatasetFormat]
    DATASET_FORMAT_PREFERENCE: _ClassVar[DatasetFormat]

class OversizeImages(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OVERSIZE_IMAGES_UNSPECIFIED: _ClassVar[OversizeImages]
    OVERSIZE_IMAGES_RESIZE: _ClassVar[OversizeImages]
    OVERSIZE_IMAGES_REFUSE: _ClassVar[OversizeImages]

class OomMove(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OOM_MOVE_UNSPECIFIED: _ClassVar[OomMove]
    OOM_MOVE_HALVE_MICRO_BATCH: _ClassVar[OomMove]
    OOM_MOVE_GRADIENT_CHECKPOINTING: _ClassVar[OomMove]
    OOM_MOVE_NEXT_ZERO_STAGE: _ClassVar[OomMove]
    OOM_MOVE_OFFLOAD_OPTIMIZER: _ClassVar[OomMove]
    OOM_MOVE_SHORTER_SEQUENCES: _ClassVar[OomMove]
    OOM_MOVE_QLORA: _ClassVar[OomMove]
DATASET_FORMAT_UNSPECIFIED: DatasetFormat
DATASET_FORMAT_TEXT: DatasetFormat
DATASET_FORMAT_INSTRUCTION: DatasetFormat
DATASET_FORMAT_CHAT: DatasetFormat
DATASET_FORMAT_PREFERENCE: DatasetFormat
OVERSIZE_IMAGES_UNSPECIFIED: OversizeImages
OVERSIZE_IMAGES_RESIZE: OversizeImages
OVERSIZE_IMAGES_REFUSE: OversizeImages
OOM_MOVE_UNSPECIFIED: OomMove
OOM_MOVE_HALVE_MICRO_BATCH: OomMove
OOM_MOVE_GRADIENT_CHECKPOINTING: OomMove
OOM_MOVE_NEXT_ZERO_STAGE: OomMove
OOM_MOVE_OFFLOAD_OPTIMIZER: OomMove
OOM_MOVE_SHORTER_SEQUENCES: OomMove
OOM_MOVE_QLORA: OomMove

class MemoryBreakdown(_message.Message):
    __slots__ = ("weights_bytes", "adapter_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "logits_bytes", "deepspeed_buffers_bytes", "cuda_context_bytes", "allocator_bytes", "overhead_bytes", "total_bytes", "optimizer_step_bytes", "gathered_parameters_bytes", "regathered_experts_bytes", "cuda_workspace_bytes", "loading_bytes")
    WEIGHTS_BYTES_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_BYTES_FIELD_NUMBER: _ClassVar[int]
    GRADIENTS_BYTES_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_BYTES_FIELD_NUMBER: _ClassVar[int]
    ACTIVATIONS_BYTES_FIELD_NUMBER: _ClassVar[int]
    LOGITS_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEEPSPEED_BUFFERS_BYTES_FIELD_NUMBER: _ClassVar[int]
    CUDA_CONTEXT_BYTES_FIELD_NUMBER: _ClassVar[int]
    ALLOCATOR_BYTES_FIELD_NUMBER: _ClassVar[int]
    OVERHEAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_STEP_BYTES_FIELD_NUMBER: _ClassVar[int]
    GATHERED_PARAMETERS_BYTES_FIELD_NUMBER: _ClassVar[int]
    REGATHERED_EXPERTS_BYTES_FIELD_NUMBER: _ClassVar[int]
    CUDA_WORKSPACE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LOADING_BYTES_FIELD_NUMBER: _ClassVar[int]
    weights_bytes: int
    adapter_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    logits_bytes: int
    deepspeed_buffers_bytes: int
    cuda_context_bytes: int
    allocator_bytes: int
    overhead_bytes: int
    total_bytes: int
    optimizer_step_bytes: int
    gathered_parameters_bytes: int
    regathered_experts_bytes: int
    cuda_workspace_bytes: int
    loading_bytes: int
    def __init__(self, weights_bytes: _Optional[int] = ..., adapter_bytes: _Optional[int] = ..., gradients_bytes: _Optional[int] = ..., optimizer_bytes: _Optional[int] = ..., activations_bytes: _Optional[int] = ..., logits_bytes: _Optional[int] = ..., deepspeed_buffers_bytes: _Optional[int] = ..., cuda_context_bytes: _Optional[int] = ..., allocator_bytes: _Optional[int] = ..., overhead_bytes: _Optional[int] = ..., total_bytes: _Optional[int] = ..., optimizer_step_bytes: _Optional[int] = ..., gathered_parameters_bytes: _Optional[int] = ..., regathered_experts_bytes: _Optional[int] = ..., cuda_workspace_bytes: _Optional[int] = ..., loading_bytes: _Optional[int] = ...) -> None: ...

class HostMemory(_message.Message):
    __slots__ = ("offloaded_optimizer_bytes", "offloaded_parameters_bytes", "model_loading_bytes", "process_bytes", "total_bytes", "capacity_bytes", "fits")
    OFFLOADED_OPTIMIZER_BYTES_FIELD_NUMBER: _ClassVar[int]
    OFFLOADED_PARAMETERS_BYTES_FIELD_NUMBER: _ClassVar[int]
    MODEL_LOADING_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROCESS_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    FITS_FIELD_NUMBER: _ClassVar[int]
    offloaded_optimizer_bytes: int
    offloaded_parameters_bytes: int
    model_loading_bytes: int
    process_bytes: int
    total_bytes: int
    capacity_bytes: int
    fits: bool
    def __init__(self, offloaded_optimizer_bytes: _Optional[int] = ..., offloaded_parameters_bytes: _Optional[int] = ..., model_loading_bytes: _Optional[int] = ..., process_bytes: _Optional[int] = ..., total_bytes: _Optional[int] = ..., capacity_bytes: _Optional[int] = ..., fits: _Optional[bool] = ...) -> None: ...

class Suggestion(_message.Message):
    __slots__ = ("change", "reason", "per_gpu_total_bytes", "fits")
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PER_GPU_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    FITS_FIELD_NUMBER: _ClassVar[int]
    change: str
    reason: str
    per_gpu_total_bytes: int
    fits: bool
    def __init__(self, change: _Optional[str] = ..., reason: _Optional[str] = ..., per_gpu_total_bytes: _Optional[int] = ..., fits: _Optional[bool] = ...) -> None: ...

class ResolvedHardware(_message.Message):
    __slots__ = ("gpu", "gpus_per_node", "nodes", "host_memory_bytes", "hourly_usd_per_gpu", "spot", "provider", "flavor", "inter_node_bandwidth_bytes_per_s")
    GPU_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    HOST_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    HOURLY_USD_PER_GPU_FIELD_NUMBER: _ClassVar[int]
    SPOT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    FLAVOR_FIELD_NUMBER: _ClassVar[int]
    INTER_NODE_BANDWIDTH_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    gpu: _hardware_pb2.GpuSpec
    gpus_per_node: int
    nodes: int
    host_memory_bytes: int
    hourly_usd_per_gpu: float
    spot: bool
    provider: str
    flavor: str
    inter_node_bandwidth_bytes_per_s: float
    def __init__(self, gpu: _Optional[_Union[_hardware_pb2.GpuSpec, _Mapping]] = ..., gpus_per_node: _Optional[int] = ..., nodes: _Optional[int] = ..., host_memory_bytes: _Optional[int] = ..., hourly_usd_per_gpu: _Optional[float] = ..., spot: _Optional[bool] = ..., provider: _Optional[str] = ..., flavor: _Optional[str] = ..., inter_node_bandwidth_bytes_per_s: _Optional[float] = ...) -> None: ...

class FitResult(_message.Message):
    __slots__ = ("fits", "per_gpu", "host", "capacity_bytes", "headroom_bytes", "max_micro_batch", "suggestions", "notes", "model", "hardware", "training", "trainable_parameter_count", "total_low_bytes", "total_high_bytes", "band_basis", "tight", "margin_fraction", "inference", "fit_probability", "calibrated")
    FITS_FIELD_NUMBER: _ClassVar[int]
    PER_GPU_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    HEADROOM_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_MICRO_BATCH_FIELD_NUMBER: _ClassVar[int]
    SUGGESTIONS_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    TRAINABLE_PARAMETER_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LOW_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_HIGH_BYTES_FIELD_NUMBER: _ClassVar[int]
    BAND_BASIS_FIELD_NUMBER: _ClassVar[int]
    TIGHT_FIELD_NUMBER: _ClassVar[int]
    MARGIN_FRACTION_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_FIELD_NUMBER: _ClassVar[int]
    FIT_PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    CALIBRATED_FIELD_NUMBER: _ClassVar[int]
    fits: bool
    per_gpu: MemoryBreakdown
    host: HostMemory
    capacity_bytes: int
    headroom_bytes: int
    max_micro_batch: int
    suggestions: _containers.RepeatedCompositeFieldContainer[Suggestion]
    notes: _containers.RepeatedScalarFieldContainer[str]
    model: _model_pb2.ModelInfo
    hardware: ResolvedHardware
    training: _training_pb2.TrainingSpec
    trainable_parameter_count: int
    total_low_bytes: int
    total_high_bytes: int
    band_basis: str
    tight: bool
    margin_fraction: float
    inference: bool
    fit_probability: float
    calibrated: bool
    def __init__(self, fits: _Optional[bool] = ..., per_gpu: _Optional[_Union[MemoryBreakdown, _Mapping]] = ..., host: _Optional[_Union[HostMemory, _Mapping]] = ..., capacity_bytes: _Optional[int] = ..., headroom_bytes: _Optional[int] = ..., max_micro_batch: _Optional[int] = ..., suggestions: _Optional[_Iterable[_Union[Suggestion, _Mapping]]] = ..., notes: _Optional[_Iterable[str]] = ..., model: _Optional[_Union[_model_pb2.ModelInfo, _Mapping]] = ..., hardware: _Optional[_Union[ResolvedHardware, _Mapping]] = ..., training: _Optional[_Union[_training_pb2.TrainingSpec, _Mapping]] = ..., trainable_parameter_count: _Optional[int] = ..., total_low_bytes: _Optional[int] = ..., total_high_bytes: _Optional[int] = ..., band_basis: _Optional[str] = ..., tight: _Optional[bool] = ..., margin_fraction: _Optional[float] = ..., inference: _Optional[bool] = ..., fit_probability: _Optional[float] = ..., calibrated: _Optional[bool] = ...) -> None: ...

class TimeEstimate(_message.Message):
    __slots__ = ("flops_per_token", "model_flops_utilization", "compute_time_per_step_s", "communication_time_per_step_s", "offload_time_per_step_s", "step_time_s", "tokens_per_s", "total_steps", "total_tokens", "duration_s_low", "duration_s", "duration_s_high", "gpu_hours", "cost_usd_low", "cost_usd", "cost_usd_high", "hourly_usd", "priced")
    FLOPS_PER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    MODEL_FLOPS_UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_TIME_PER_STEP_S_FIELD_NUMBER: _ClassVar[int]
    COMMUNICATION_TIME_PER_STEP_S_FIELD_NUMBER: _ClassVar[int]
    OFFLOAD_TIME_PER_STEP_S_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_S_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_LOW_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_HIGH_FIELD_NUMBER: _ClassVar[int]
    GPU_HOURS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_LOW_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    COST_USD_HIGH_FIELD_NUMBER: _ClassVar[int]
    HOURLY_USD_FIELD_NUMBER: _ClassVar[int]
    PRICED_FIELD_NUMBER: _ClassVar[int]
    flops_per_token: float
    model_flops_utilization: float
    compute_time_per_step_s: float
    communication_time_per_step_s: float
    offload_time_per_step_s: float
    step_time_s: float
    tokens_per_s: float
    total_steps: int
    total_tokens: int
    duration_s_low: float
    duration_s: float
    duration_s_high: float
    gpu_hours: float
    cost_usd_low: float
    cost_usd: float
    cost_usd_high: float
    hourly_usd: float
    priced: bool
    def __init__(self, flops_per_token: _Optional[float] = ..., model_flops_utilization: _Optional[float] = ..., compute_time_per_step_s: _Optional[float] = ..., communication_time_per_step_s: _Optional[float] = ..., offload_time_per_step_s: _Optional[float] = ..., step_time_s: _Optional[float] = ..., tokens_per_s: _Optional[float] = ..., total_steps: _Optional[int] = ..., total_tokens: _Optional[int] = ..., duration_s_low: _Optional[float] = ..., duration_s: _Optional[float] = ..., duration_s_high: _Optional[float] = ..., gpu_hours: _Optional[float] = ..., cost_usd_low: _Optional[float] = ..., cost_usd: _Optional[float] = ..., cost_usd_high: _Optional[float] = ..., hourly_usd: _Optional[float] = ..., priced: _Optional[bool] = ...) -> None: ...

class DatasetRef(_message.Message):
    __slots__ = ("local_path", "hub_name", "format", "split", "packing", "oversize_images")
    LOCAL_PATH_FIELD_NUMBER: _ClassVar[int]
    HUB_NAME_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    PACKING_FIELD_NUMBER: _ClassVar[int]
    OVERSIZE_IMAGES_FIELD_NUMBER: _ClassVar[int]
    local_path: str
    hub_name: str
    format: DatasetFormat
    split: str
    packing: bool
    oversize_images: OversizeImages
    def __init__(self, local_path: _Optional[str] = ..., hub_name: _Optional[str] = ..., format: _Optional[_Union[DatasetFormat, str]] = ..., split: _Optional[str] = ..., packing: _Optional[bool] = ..., oversize_images: _Optional[_Union[OversizeImages, str]] = ...) -> None: ...

class Hyperparameters(_message.Message):
    __slots__ = ("learning_rate", "weight_decay", "warmup_ratio", "max_grad_norm", "seed", "checkpoint_every_steps", "deterministic")
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    WARMUP_RATIO_FIELD_NUMBER: _ClassVar[int]
    MAX_GRAD_NORM_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_EVERY_STEPS_FIELD_NUMBER: _ClassVar[int]
    DETERMINISTIC_FIELD_NUMBER: _ClassVar[int]
    learning_rate: float
    weight_decay: float
    warmup_ratio: float
    max_grad_norm: float
    seed: int
    checkpoint_every_steps: int
    deterministic: bool
    def __init__(self, learning_rate: _Optional[float] = ..., weight_decay: _Optional[float] = ..., warmup_ratio: _Optional[float] = ..., max_grad_norm: _Optional[float] = ..., seed: _Optional[int] = ..., checkpoint_every_steps: _Optional[int] = ..., deterministic: _Optional[bool] = ...) -> None: ...

class Prediction(_message.Message):
    __slots__ = ("fit", "estimate")
    FIT_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    fit: FitResult
    estimate: TimeEstimate
    def __init__(self, fit: _Optional[_Union[FitResult, _Mapping]] = ..., estimate: _Optional[_Union[TimeEstimate, _Mapping]] = ...) -> None: ...

class OomPolicy(_message.Message):
    __slots__ = ("moves", "max_replans", "disabled")
    MOVES_FIELD_NUMBER: _ClassVar[int]
    MAX_REPLANS_FIELD_NUMBER: _ClassVar[int]
    DISABLED_FIELD_NUMBER: _ClassVar[int]
    moves: _containers.RepeatedScalarFieldContainer[OomMove]
    max_replans: int
    disabled: bool
    def __init__(self, moves: _Optional[_Iterable[_Union[OomMove, str]]] = ..., max_replans: _Optional[int] = ..., disabled: _Optional[bool] = ...) -> None: ...

class Plan(_message.Message):
    __slots__ = ("plan_id", "model", "dataset", "training", "hardware", "workload", "hyperparameters", "deepspeed_config_json", "output_uri", "prediction", "created_at", "on_oom")
    PLAN_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    HYPERPARAMETERS_FIELD_NUMBER: _ClassVar[int]
    DEEPSPEED_CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_URI_FIELD_NUMBER: _ClassVar[int]
    PREDICTION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    ON_OOM_FIELD_NUMBER: _ClassVar[int]
    plan_id: str
    model: _model_pb2.ModelRef
    dataset: DatasetRef
    training: _training_pb2.TrainingSpec
    hardware: _hardware_pb2.HardwareSpec
    workload: _training_pb2.WorkloadSpec
    hyperparameters: Hyperparameters
    deepspeed_config_json: str
    output_uri: str
    prediction: Prediction
    created_at: _timestamp_pb2.Timestamp
    on_oom: OomPolicy
    def __init__(self, plan_id: _Optional[str] = ..., model: _Optional[_Union[_model_pb2.ModelRef, _Mapping]] = ..., dataset: _Optional[_Union[DatasetRef, _Mapping]] = ..., training: _Optional[_Union[_training_pb2.TrainingSpec, _Mapping]] = ..., hardware: _Optional[_Union[_hardware_pb2.HardwareSpec, _Mapping]] = ..., workload: _Optional[_Union[_training_pb2.WorkloadSpec, _Mapping]] = ..., hyperparameters: _Optional[_Union[Hyperparameters, _Mapping]] = ..., deepspeed_config_json: _Optional[str] = ..., output_uri: _Optional[str] = ..., prediction: _Optional[_Union[Prediction, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., on_oom: _Optional[_Union[OomPolicy, _Mapping]] = ...) -> None: ...

import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PHASE_UNSPECIFIED: _ClassVar[Phase]
    PHASE_QUEUED: _ClassVar[Phase]
    PHASE_LOADING: _ClassVar[Phase]
    PHASE_PREFLIGHT: _ClassVar[Phase]
    PHASE_TRAINING: _ClassVar[Phase]
    PHASE_CHECKPOINTING: _ClassVar[Phase]
    PHASE_DONE: _ClassVar[Phase]
    PHASE_FAILED: _ClassVar[Phase]
    PHASE_CANCELLED: _ClassVar[Phase]
PHASE_UNSPECIFIED: Phase
PHASE_QUEUED: Phase
PHASE_LOADING: Phase
PHASE_PREFLIGHT: Phase
PHASE_TRAINING: Phase
PHASE_CHECKPOINTING: Phase
PHASE_DONE: Phase
PHASE_FAILED: Phase
PHASE_CANCELLED: Phase

class ProgressEvent(_message.Message):
    __slots__ = ("job_id", "sequence", "time", "phase", "step", "total_steps", "epoch", "loss", "learning_rate", "tokens_per_s", "peak_gpu_memory_bytes", "peak_host_memory_bytes", "eta_s", "message", "checkpoint_path", "metrics", "stored_checkpoint")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    PEAK_GPU_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PEAK_HOST_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    ETA_S_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_PATH_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    STORED_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    sequence: int
    time: _timestamp_pb2.Timestamp
    phase: Phase
    step: int
    total_steps: int
    epoch: float
    loss: float
    learning_rate: float
    tokens_per_s: float
    peak_gpu_memory_bytes: int
    peak_host_memory_bytes: int
    eta_s: float
    message: str
    checkpoint_path: str
    metrics: _containers.ScalarMap[str, float]
    stored_checkpoint: StoredCheckpoint
    def __init__(self, job_id: _Optional[str] = ..., sequence: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., phase: _Optional[_Union[Phase, str]] = ..., step: _Optional[int] = ..., total_steps: _Optional[int] = ..., epoch: _Optional[float] = ..., loss: _Optional[float] = ..., learning_rate: _Optional[float] = ..., tokens_per_s: _Optional[float] = ..., peak_gpu_memory_bytes: _Optional[int] = ..., peak_host_memory_bytes: _Optional[int] = ..., eta_s: _Optional[float] = ..., message: _Optional[str] = ..., checkpoint_path: _Optional[str] = ..., metrics: _Optional[_Mapping[str, float]] = ..., stored_checkpoint: _Optional[_Union[StoredCheckpoint, _Mapping]] = ...) -> None: ...

class StoredCheckpoint(_message.Message):
    __slots__ = ("step", "uri")
    STEP_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    step: int
    uri: str
    def __init__(self, step: _Optional[int] = ..., uri: _Optional[str] = ...) -> None: ...

class Feedback(_message.Message):
    __slots__ = ("predicted_peak_gpu_memory_bytes", "measured_peak_gpu_memory_bytes", "measured_peak_gpu_reserved_bytes", "predicted_step_time_s", "measured_step_time_s", "predicted_tokens_per_s", "measured_tokens_per_s", "nodes", "world_size", "predicted_communication_time_s", "library_versions", "predicted_allocated_gpu_memory_bytes")
    class LibraryVersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PREDICTED_PEAK_GPU_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEASURED_PEAK_GPU_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEASURED_PEAK_GPU_RESERVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_STEP_TIME_S_FIELD_NUMBER: _ClassVar[int]
    MEASURED_STEP_TIME_S_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    MEASURED_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_COMMUNICATION_TIME_S_FIELD_NUMBER: _ClassVar[int]
    LIBRARY_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_ALLOCATED_GPU_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    predicted_peak_gpu_memory_bytes: int
    measured_peak_gpu_memory_bytes: int
    measured_peak_gpu_reserved_bytes: int
    predicted_step_time_s: float
    measured_step_time_s: float
    predicted_tokens_per_s: float
    measured_tokens_per_s: float
    nodes: int
    world_size: int
    predicted_communication_time_s: float
    library_versions: _containers.ScalarMap[str, str]
    predicted_allocated_gpu_memory_bytes: int
    def __init__(self, predicted_peak_gpu_memory_bytes: _Optional[int] = ..., measured_peak_gpu_memory_bytes: _Optional[int] = ..., measured_peak_gpu_reserved_bytes: _Optional[int] = ..., predicted_step_time_s: _Optional[float] = ..., measured_step_time_s: _Optional[float] = ..., predicted_tokens_per_s: _Optional[float] = ..., measured_tokens_per_s: _Optional[float] = ..., nodes: _Optional[int] = ..., world_size: _Optional[int] = ..., predicted_communication_time_s: _Optional[float] = ..., library_versions: _Optional[_Mapping[str, str]] = ..., predicted_allocated_gpu_memory_bytes: _Optional[int] = ...) -> None: ...

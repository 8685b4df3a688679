from tunefleet.v1 import hardware_pb2 as _hardware_pb2
from tunefleet.v1 import model_pb2 as _model_pb2
from tunefleet.v1 import plan_pb2 as _plan_pb2
from tunefleet.v1 import training_pb2 as _training_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RankBy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RANK_BY_UNSPECIFIED: _ClassVar[RankBy]
    RANK_BY_COST: _ClassVar[RankBy]
    RANK_BY_TIME: _ClassVar[RankBy]
    RANK_BY_PARETO: _ClassVar[RankBy]

class RejectionReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REJECTION_REASON_UNSPECIFIED: _ClassVar[RejectionReason]
    REJECTION_REASON_DOES_NOT_FIT: _ClassVar[RejectionReason]
    REJECTION_REASON_HOST_MEMORY: _ClassVar[RejectionReason]
    REJECTION_REASON_OVER_BUDGET: _ClassVar[RejectionReason]
    REJECTION_REASON_OVER_DEADLINE: _ClassVar[RejectionReason]
    REJECTION_REASON_NO_PRICE: _ClassVar[RejectionReason]
    REJECTION_REASON_UNSUPPORTED: _ClassVar[RejectionReason]
    REJECTION_REASON_DOMINATED: _ClassVar[RejectionReason]
RANK_BY_UNSPECIFIED: RankBy
RANK_BY_COST: RankBy
RANK_BY_TIME: RankBy
RANK_BY_PARETO: RankBy
REJECTION_REASON_UNSPECIFIED: RejectionReason
REJECTION_REASON_DOES_NOT_FIT: RejectionReason
REJECTION_REASON_HOST_MEMORY: RejectionReason
REJECTION_REASON_OVER_BUDGET: RejectionReason
REJECTION_REASON_OVER_DEADLINE: RejectionReason
REJECTION_REASON_NO_PRICE: RejectionReason
REJECTION_REASON_UNSUPPORTED: RejectionReason
REJECTION_REASON_DOMINATED: RejectionReason

class FitRequest(_message.Message):
    __slots__ = ("model", "training", "hardware", "margin_fraction", "inference")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    MARGIN_FRACTION_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_FIELD_NUMBER: _ClassVar[int]
    model: _model_pb2.ModelRef
    training: _training_pb2.TrainingSpec
    hardware: _hardware_pb2.HardwareSpec
    margin_fraction: float
    inference: InferenceSpec
    def __init__(self, model: _Optional[_Union[_model_pb2.ModelRef, _Mapping]] = ..., training: _Optional[_Union[_training_pb2.TrainingSpec, _Mapping]] = ..., hardware: _Optional[_Union[_hardware_pb2.HardwareSpec, _Mapping]] = ..., margin_fraction: _Optional[float] = ..., inference: _Optional[_Union[InferenceSpec, _Mapping]] = ...) -> None: ...

class InferenceSpec(_message.Message):
    __slots__ = ("batch_size", "context_tokens")
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    batch_size: int
    context_tokens: int
    def __init__(self, batch_size: _Optional[int] = ..., context_tokens: _Optional[int] = ...) -> None: ...

class FitResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: _plan_pb2.FitResult
    def __init__(self, result: _Optional[_Union[_plan_pb2.FitResult, _Mapping]] = ...) -> None: ...

class EstimateRequest(_message.Message):
    __slots__ = ("model", "training", "hardware", "workload", "margin_fraction")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    MARGIN_FRACTION_FIELD_NUMBER: _ClassVar[int]
    model: _model_pb2.ModelRef
    training: _training_pb2.TrainingSpec
    hardware: _hardware_pb2.HardwareSpec
    workload: _training_pb2.WorkloadSpec
    margin_fraction: float
    def __init__(self, model: _Optional[_Union[_model_pb2.ModelRef, _Mapping]] = ..., training: _Optional[_Union[_training_pb2.TrainingSpec, _Mapping]] = ..., hardware: _Optional[_Union[_hardware_pb2.HardwareSpec, _Mapping]] = ..., workload: _Optional[_Union[_training_pb2.WorkloadSpec, _Mapping]] = ..., margin_fraction: _Optional[float] = ...) -> None: ...

class EstimateResponse(_message.Message):
    __slots__ = ("fit", "estimate")
    FIT_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    fit: _plan_pb2.FitResult
    estimate: _plan_pb2.TimeEstimate
    def __init__(self, fit: _Optional[_Union[_plan_pb2.FitResult, _Mapping]] = ..., estimate: _Optional[_Union[_plan_pb2.TimeEstimate, _Mapping]] = ...) -> None: ...

class Constraints(_message.Message):
    __slots__ = ("max_cost_usd", "max_duration_s", "allowed_gpus", "allowed_providers", "max_gpus", "allow_spot", "allowed_methods", "rank_by", "allow_tight")
    MAX_COST_USD_FIELD_NUMBER: _ClassVar[int]
    MAX_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_GPUS_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_PROVIDERS_FIELD_NUMBER: _ClassVar[int]
    MAX_GPUS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_SPOT_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_METHODS_FIELD_NUMBER: _ClassVar[int]
    RANK_BY_FIELD_NUMBER: _ClassVar[int]
    ALLOW_TIGHT_FIELD_NUMBER: _ClassVar[int]
    max_cost_usd: float
    max_duration_s: float
    allowed_gpus: _containers.RepeatedScalarFieldContainer[str]
    allowed_providers: _containers.RepeatedScalarFieldContainer[str]
    max_gpus: int
    allow_spot: bool
    allowed_methods: _containers.RepeatedScalarFieldContainer[_training_pb2.Method]
    rank_by: RankBy
    allow_tight: bool
    def __init__(self, max_cost_usd: _Optional[float] = ..., max_duration_s: _Optional[float] = ..., allowed_gpus: _Optional[_Iterable[str]] = ..., allowed_providers: _Optional[_Iterable[str]] = ..., max_gpus: _Optional[int] = ..., allow_spot: _Optional[bool] = ..., allowed_methods: _Optional[_Iterable[_Union[_training_pb2.Method, str]]] = ..., rank_by: _Optional[_Union[RankBy, str]] = ..., allow_tight: _Optional[bool] = ...) -> None: ...

class RecommendRequest(_message.Message):
    __slots__ = ("model", "training", "workload", "constraints", "limit", "dataset")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    model: _model_pb2.ModelRef
    training: _training_pb2.TrainingSpec
    workload: _training_pb2.WorkloadSpec
    constraints: Constraints
    limit: int
    dataset: _plan_pb2.DatasetRef
    def __init__(self, model: _Optional[_Union[_model_pb2.ModelRef, _Mapping]] = ..., training: _Optional[_Union[_training_pb2.TrainingSpec, _Mapping]] = ..., workload: _Optional[_Union[_training_pb2.WorkloadSpec, _Mapping]] = ..., constraints: _Optional[_Union[Constraints, _Mapping]] = ..., limit: _Optional[int] = ..., dataset: _Optional[_Union[_plan_pb2.DatasetRef, _Mapping]] = ...) -> None: ...

class Candidate(_message.Message):
    __slots__ = ("hardware", "training", "fit", "estimate", "pareto_optimal")
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    FIT_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    PARETO_OPTIMAL_FIELD_NUMBER: _ClassVar[int]
    hardware: _hardware_pb2.HardwareSpec
    training: _training_pb2.TrainingSpec
    fit: _plan_pb2.FitResult
    estimate: _plan_pb2.TimeEstimate
    pareto_optimal: bool
    def __init__(self, hardware: _Optional[_Union[_hardware_pb2.HardwareSpec, _Mapping]] = ..., training: _Optional[_Union[_training_pb2.TrainingSpec, _Mapping]] = ..., fit: _Optional[_Union[_plan_pb2.FitResult, _Mapping]] = ..., estimate: _Optional[_Union[_plan_pb2.TimeEstimate, _Mapping]] = ..., pareto_optimal: _Optional[bool] = ...) -> None: ...

class Rejection(_message.Message):
    __slots__ = ("gpu", "gpu_count", "reason", "detail")
    GPU_FIELD_NUMBER: _ClassVar[int]
    GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    gpu: str
    gpu_count: int
    reason: RejectionReason
    detail: str
    def __init__(self, gpu: _Optional[str] = ..., gpu_count: _Optional[int] = ..., reason: _Optional[_Union[RejectionReason, str]] = ..., detail: _Optional[str] = ...) -> None: ...

class RecommendResponse(_message.Message):
    __slots__ = ("candidates", "rejections", "plan", "evaluated_count")
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    REJECTIONS_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    EVALUATED_COUNT_FIELD_NUMBER: _ClassVar[int]
    candidates: _containers.RepeatedCompositeFieldContainer[Candidate]
    rejections: _containers.RepeatedCompositeFieldContainer[Rejection]
    plan: _plan_pb2.Plan
    evaluated_count: int
    def __init__(self, candidates: _Optional[_Iterable[_Union[Candidate, _Mapping]]] = ..., rejections: _Optional[_Iterable[_Union[Rejection, _Mapping]]] = ..., plan: _Optional[_Union[_plan_pb2.Plan, _Mapping]] = ..., evaluated_count: _Optional[int] = ...) -> None: ...

class ListHardwareRequest(_message.Message):
    __slots__ = ("provider",)
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    provider: str
    def __init__(self, provider: _Optional[str] = ...) -> None: ...

class ListHardwareResponse(_message.Message):
    __slots__ = ("gpus", "flavors")
    GPUS_FIELD_NUMBER: _ClassVar[int]
    FLAVORS_FIELD_NUMBER: _ClassVar[int]
    gpus: _containers.RepeatedCompositeFieldContainer[_hardware_pb2.GpuSpec]
    flavors: _containers.RepeatedCompositeFieldContainer[_hardware_pb2.Flavor]
    def __init__(self, gpus: _Optional[_Iterable[_Union[_hardware_pb2.GpuSpec, _Mapping]]] = ..., flavors: _Optional[_Iterable[_Union[_hardware_pb2.Flavor, _Mapping]]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ("family",)
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    family: _model_pb2.ModelFamily
    def __init__(self, family: _Optional[_Union[_model_pb2.ModelFamily, str]] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[_model_pb2.ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[_model_pb2.ModelInfo, _Mapping]]] = ...) -> None: ...

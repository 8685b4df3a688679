from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Interconnect(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INTERCONNECT_UNSPECIFIED: _ClassVar[Interconnect]
    INTERCONNECT_PCIE: _ClassVar[Interconnect]
    INTERCONNECT_NVLINK: _ClassVar[Interconnect]
    INTERCONNECT_INFINITY_FABRIC: _ClassVar[Interconnect]
INTERCONNECT_UNSPECIFIED: Interconnect
INTERCONNECT_PCIE: Interconnect
INTERCONNECT_NVLINK: Interconnect
INTERCONNECT_INFINITY_FABRIC: Interconnect

class GpuSpec(_message.Message):
    __slots__ = ("name", "display_name", "vendor", "architecture", "memory_bytes", "bf16_flops_per_s", "fp16_flops_per_s", "fp32_flops_per_s", "memory_bandwidth_bytes_per_s", "interconnect", "interconnect_bandwidth_bytes_per_s", "supports_bf16", "on_demand_hourly_usd", "spot_hourly_usd", "spec_source", "price_source", "aliases", "marketed_memory_bytes", "memory_source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    VENDOR_FIELD_NUMBER: _ClassVar[int]
    ARCHITECTURE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    BF16_FLOPS_PER_S_FIELD_NUMBER: _ClassVar[int]
    FP16_FLOPS_PER_S_FIELD_NUMBER: _ClassVar[int]
    FP32_FLOPS_PER_S_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BANDWIDTH_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    INTERCONNECT_FIELD_NUMBER: _ClassVar[int]
    INTERCONNECT_BANDWIDTH_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_BF16_FIELD_NUMBER: _ClassVar[int]
    ON_DEMAND_HOURLY_USD_FIELD_NUMBER: _ClassVar[int]
    SPOT_HOURLY_USD_FIELD_NUMBER: _ClassVar[int]
    SPEC_SOURCE_FIELD_NUMBER: _ClassVar[int]
    PRICE_SOURCE_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    MARKETED_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_SOURCE_FIELD_NUMBER: _ClassVar[int]
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
    on_demand_hourly_usd: float
    spot_hourly_usd: float
    spec_source: str
    price_source: str
    aliases: _containers.RepeatedScalarFieldContainer[str]
    marketed_memory_bytes: int
    memory_source: str
    def __init__(self, name: _Optional[str] = ..., display_name: _Optional[str] = ..., vendor: _Optional[str] = ..., architecture: _Optional[str] = ..., memory_bytes: _Optional[int] = ..., bf16_flops_per_s: _Optional[float] = ..., fp16_flops_per_s: _Optional[float] = ..., fp32_flops_per_s: _Optional[float] = ..., memory_bandwidth_bytes_per_s: _Optional[float] = ..., interconnect: _Optional[_Union[Interconnect, str]] = ..., interconnect_bandwidth_bytes_per_s: _Optional[float] = ..., supports_bf16: _Optional[bool] = ..., on_demand_hourly_usd: _Optional[float] = ..., spot_hourly_usd: _Optional[float] = ..., spec_source: _Optional[str] = ..., price_source: _Optional[str] = ..., aliases: _Optional[_Iterable[str]] = ..., marketed_memory_bytes: _Optional[int] = ..., memory_source: _Optional[str] = ...) -> None: ...

class Flavor(_message.Message):
    __slots__ = ("name", "provider", "gpu", "gpu_count", "host_memory_bytes", "vcpus", "hourly_usd", "price_source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    HOST_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    VCPUS_FIELD_NUMBER: _ClassVar[int]
    HOURLY_USD_FIELD_NUMBER: _ClassVar[int]
    PRICE_SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    provider: str
    gpu: str
    gpu_count: int
    host_memory_bytes: int
    vcpus: int
    hourly_usd: float
    price_source: str
    def __init__(self, name: _Optional[str] = ..., provider: _Optional[str] = ..., gpu: _Optional[str] = ..., gpu_count: _Optional[int] = ..., host_memory_bytes: _Optional[int] = ..., vcpus: _Optional[int] = ..., hourly_usd: _Optional[float] = ..., price_source: _Optional[str] = ...) -> None: ...

class HardwareSpec(_message.Message):
    __slots__ = ("gpu", "flavor", "gpus_per_node", "nodes", "gpu_memory_bytes", "interconnect", "interconnect_bandwidth_bytes_per_s", "inter_node_bandwidth_bytes_per_s", "host_memory_bytes", "hourly_usd_per_gpu", "spot", "provider")
    GPU_FIELD_NUMBER: _ClassVar[int]
    FLAVOR_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    INTERCONNECT_FIELD_NUMBER: _ClassVar[int]
    INTERCONNECT_BANDWIDTH_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    INTER_NODE_BANDWIDTH_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    HOST_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    HOURLY_USD_PER_GPU_FIELD_NUMBER: _ClassVar[int]
    SPOT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    gpu: str
    flavor: str
    gpus_per_node: int
    nodes: int
    gpu_memory_bytes: int
    interconnect: Interconnect
    interconnect_bandwidth_bytes_per_s: float
    inter_node_bandwidth_bytes_per_s: float
    host_memory_bytes: int
    hourly_usd_per_gpu: float
    spot: bool
    provider: str
    def __init__(self, gpu: _Optional[str] = ..., flavor: _Optional[str] = ..., gpus_per_node: _Optional[int] = ..., nodes: _Optional[int] = ..., gpu_memory_bytes: _Optional[int] = ..., interconnect: _Optional[_Union[Interconnect, str]] = ..., interconnect_bandwidth_bytes_per_s: _Optional[float] = ..., inter_node_bandwidth_bytes_per_s: _Optional[float] = ..., host_memory_bytes: _Optional[int] = ..., hourly_usd_per_gpu: _Optional[float] = ..., spot: _Optional[bool] = ..., provider: _Optional[str] = ...) -> None: ...

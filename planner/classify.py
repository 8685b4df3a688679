"""Which catalog class a GPU is: an NVML device's name and memory ('NVIDIA A100-SXM4-80GB', 79.2 GiB -> 'a100-80gb',
for a worker's host), or a plan's hardware (its GPU, through its flavor if it names one: the queue it waits on)."""

from __future__ import annotations

import re

from tunefleet.v1 import hardware_pb2

from contract.errors import InvalidFieldError, PlanError
from contract.gpu_class import CPU_CLASS
from planner.catalog import Catalog, normalise_gpu_name

_NAMED_VARIANTS = frozenset({"pcie", "nvl"})


def gpu_class_for(device_name: str, memory_bytes: int, catalog: Catalog) -> str:
    """The catalog class of an NVML device: 'NVIDIA A100-SXM4-80GB' (79.2 GiB) -> 'a100-80gb'.

    Exact names and aliases first; otherwise the catalog entries whose model number appears in the device name,
    the one with the nearest memory size."""
    try:
        return catalog.gpu(device_name).name
    except InvalidFieldError:
        pass
    key = normalise_gpu_name(device_name)
    words = set(key.split("-"))
    candidates = []
    for gpu in catalog.gpus:
        model = gpu.name.split("-")[0] if not gpu.name.startswith("rtx") else "-".join(gpu.name.split("-")[:2])
        if re.search(rf"(^|-){re.escape(model)}($|-)", key):
            # NVML names SXM parts without saying so ("NVIDIA H100 80GB HBM3"), but PCIe and NVL parts by name
            other_variant = bool(set(gpu.name.split("-")) & _NAMED_VARIANTS - words)
            candidates.append((other_variant, abs(gpu.memory_bytes - memory_bytes), gpu.name))
    if not candidates:
        return key
    return min(candidates)[2]


def plan_gpu_class(hardware: hardware_pb2.HardwareSpec, catalog: Catalog) -> str:
    """The queue class a plan asks for: its GPU (through its flavor if it names one), or cpu."""
    if normalise_gpu_name(hardware.gpu) == CPU_CLASS and not hardware.flavor:
        return CPU_CLASS
    try:
        if hardware.flavor:
            flavor = catalog.flavor(hardware.flavor)
            return catalog.gpu(flavor.gpu).name if flavor.gpu_count else CPU_CLASS
        if not hardware.gpu:
            raise PlanError("hardware.gpu", "is empty; name the GPU class the plan runs on (e.g. a100-80gb), "
                                            f"or '{CPU_CLASS}' for CPU workers")
        return catalog.gpu(hardware.gpu).name
    except InvalidFieldError as e:
        raise PlanError(e.field, e.description) from e

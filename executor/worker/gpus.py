"""What GPUs this host has: NVML (nvidia-ml-py) without initialising CUDA in the worker's process, and which catalog
class they are (planner.classify)."""

from __future__ import annotations

from contract.gpu_class import CPU_CLASS
from fleet.hosts import HostGpus
from planner.catalog import Catalog
from planner.classify import gpu_class_for


def detect_gpus(catalog: Catalog) -> HostGpus:
    """GPUs through NVML (nvidia-ml-py) without initialising CUDA in this process; no driver means class cpu."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no library, no driver or no device: a CPU host
        return HostGpus(CPU_CLASS, 0, 0)
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return HostGpus(CPU_CLASS, 0, 0)
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else name
        memory = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        return HostGpus(gpu_class_for(name, memory, catalog), count, memory, name)
    finally:
        pynvml.nvmlShutdown()

"""Is this host's GPU hardware still fit to take work? Read through NVML (nvidia-ml-py, never CUDA), judged by a
pure function against the reading taken when the worker started (or when an admin last cleared the host).

What makes a host sick (each with its source):
- a critical XID event from the driver that means the hardware, not the application, failed (`FATAL_XIDS`);
- a GPU that NVML no longer sees, or that answers NVML_ERROR_GPU_IS_LOST (XID 79: fallen off the bus);
- uncorrectable (double-bit) ECC errors since the driver loaded, more than at the baseline;
- retired pages pending (a page retired since the driver loaded: the GPU must be reset to stop using it), or a
  failed row remapping (A100 and later), per NVIDIA's dynamic page retirement and row remapping documents.

`source()` is the one place the readings come from: NVML on a GPU host, nothing on a CPU host. Tests, which run
on CPUs, replace it with readings of their own (devtools.injected_gpu_health).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from fleet.hosts import HostRegistry

log = structlog.get_logger("executor.worker.gpu_health")

# XIDs that mean the GPU or its memory failed, not the program on it (NVIDIA, "Xid Errors" catalog,
# docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, and "Dynamic Page Retirement",
# docs.nvidia.com/deploy/dynamic-page-retirement; read 2026-11). Application faults (13, 31, 43, 45) are not here:
# they end the job that caused them, and the host is fine.
FATAL_XIDS = {
    48: "double-bit ECC error",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded: reset the GPU",
    64: "ECC page retirement or row remapper failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}


@dataclass(frozen=True)
class DeviceHealth:
    index: int
    xids: tuple[int, ...] = ()  # critical XID events since the previous reading
    ecc_uncorrected: int = 0  # volatile (since the driver loaded) uncorrectable ECC errors
    retired_pages_pending: bool = False
    remap_failed: bool = False
    lost: bool = False  # NVML_ERROR_GPU_IS_LOST


@dataclass(frozen=True)
class Reading:
    devices: tuple[DeviceHealth, ...]


def problems(baseline: Reading, now: Reading) -> list[str]:
    """Why this host should take no more work, in words; [] when it is healthy."""
    found = []
    if len(now.devices) < len(baseline.devices):
        found.append(f"{len(baseline.devices) - len(now.devices)} GPU(s) disappeared: NVML sees {len(now.devices)} "
                     f"of {len(baseline.devices)}")
    before = {d.index: d for d in baseline.devices}
    for d in now.devices:
        gpu = f"GPU {d.index}"
        if d.lost:
            found.append(f"{gpu} is lost (NVML_ERROR_GPU_IS_LOST: fallen off the bus)")
        for xid in d.xids:
            if xid in FATAL_XIDS:
                found.append(f"{gpu}: XID {xid} ({FATAL_XIDS[xid]})")
        new_ecc = d.ecc_uncorrected - (before[d.index].ecc_uncorrected if d.index in before else 0)
        if new_ecc > 0:
            found.append(f"{gpu}: {new_ecc} uncorrectable (double-bit) ECC error(s)")
        if d.retired_pages_pending:
            found.append(f"{gpu}: retired pages pending (reset the GPU to retire them)")
        if d.remap_failed:
            found.append(f"{gpu}: row remapping failed")
    return found


class Source(Protocol):
    def read(self) -> Reading: ...

    def close(self) -> None: ...


class NvmlSource:
    """NVML kept open with an event set for critical XIDs, so that each reading sees the XIDs since the last."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.events = nvml.nvmlEventSetCreate()
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self.events)
            except nvml.NVMLError as e:  # consumer GPUs may not report events: the other checks still run
                log.info("gpu_health.no_xid_events", gpu=i, error=str(e))

    def _xids(self) -> dict[int, list[int]]:
        """The critical XIDs since the last reading, by GPU index (the event set queues them until read)."""
        by_index: dict[int, list[int]] = {}
        while True:
            try:
                event = self.nvml.nvmlEventSetWait_v2(self.events, 0)
            except self.nvml.NVMLError:  # NVML_ERROR_TIMEOUT: no event left
                return by_index
            by_index.setdefault(self.nvml.nvmlDeviceGetIndex(event.device), []).append(int(event.eventData))

    def _device(self, i: int, xids: list[int]) -> DeviceHealth:
        nvml = self.nvml

        def optional(fn: Any, *args: Any) -> Any:
            try:
                return fn(*args)
            except nvml.NVMLError as e:
                if getattr(e, "value", None) == nvml.NVML_ERROR_GPU_IS_LOST:
                    raise
                return None  # not supported on this GPU (no ECC on GeForce, no row remapper before Ampere)

        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            ecc = optional(nvml.nvmlDeviceGetTotalEccErrors, handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                           nvml.NVML_VOLATILE_ECC) or 0
            pending = optional(nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
            remapped = optional(nvml.nvmlDeviceGetRemappedRows, handle)
        except nvml.NVMLError as e:
            if getattr(e, "value", None) == nvml.NVML_ERROR_GPU_IS_LOST:
                return DeviceHealth(i, tuple(xids), lost=True)
            raise
        return DeviceHealth(i, tuple(xids), int(ecc), bool(pending), bool(remapped and remapped[3]))

    def read(self) -> Reading:
        xids = self._xids()
        count = self.nvml.nvmlDeviceGetCount()
        return Reading(tuple(self._device(i, xids.get(i, [])) for i in range(count)))

    def close(self) -> None:
        self.nvml.nvmlEventSetFree(self.events)
        self.nvml.nvmlShutdown()


def source() -> Source | None:
    """NVML's readings of this host's GPUs; None on a host without NVML or GPUs (nothing to watch)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no library, no driver: a CPU host
        return None
    if pynvml.nvmlDeviceGetCount() == 0:
        pynvml.nvmlShutdown()
        return None
    return NvmlSource(pynvml)


class HostHealth:
    """This worker's view of its host's health: the baseline reading, and the quarantine in force (`reason`, read
    by the claim loop and by the supervision of a running job). `check` runs with every heartbeat."""

    def __init__(self, gpus: Source | None, registry: HostRegistry, host_id: str) -> None:
        self.gpus, self.registry, self.host_id = gpus, registry, host_id
        self.baseline = gpus.read() if gpus is not None else None
        self.reason: str | None = None

    def _sick(self) -> list[str]:
        if self.gpus is None or self.baseline is None:
            return []
        try:
            return problems(self.baseline, self.gpus.read())
        except Exception as e:  # noqa: BLE001 - a GPU NVML cannot read is not one to run jobs on
            return [f"NVML could not read the GPUs: {type(e).__name__}: {e}"]

    def check(self) -> str | None:
        """Read the GPUs, quarantine the host when they are sick, and learn whether an admin cleared it; the
        quarantine in force."""
        found = self._sick()
        if found and self.reason is None:
            reason = self.registry.quarantine(self.host_id, "; ".join(found))
            log.error("host.quarantined", host_id=self.host_id, reason=reason)
        in_force = self.registry.quarantine_reason(self.host_id)
        if self.reason is not None and in_force is None and self.gpus is not None:
            self.baseline = self.gpus.read()  # cleared: counters as they stand now are the new normal
            log.info("host.cleared", host_id=self.host_id, was=self.reason)
        self.reason = in_force
        return in_force

"""A rank that runs out of memory says so in a form its worker can re-plan from (contract.oom): on a GPU, a step's
torch.OutOfMemoryError; on a CPU host — no GPU to fill — the first step's allocated peak, counted by the same
live-bytes counter as the planner's simulation (executor.training.live_bytes), against the capacity the plan was
sized for. Under a fleet worker (contract.oom.REPLAN_ENV) the rank writes the report and exits for a re-plan;
run by hand it fails with the advice to change the plan."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from common.units import GiB, KiB, MiB
from contract import oom
from contract.errors import DoesNotFitError
from contract.run_config import RunConfig
from executor.training.live_bytes import LiveBytes

ADVICE = ("lower training.micro_batch_size (raising gradient_accumulation_steps to keep the batch), turn on "
          "gradient_checkpointing, or raise the ZeRO stage")
# torch's message for a failed CUDA allocation: "Tried to allocate 2.00 GiB"
_TRIED = re.compile(r"Tried to allocate (?P<amount>[\d.]+) (?P<unit>[KMG]iB)")
_UNIT_BYTES = {"KiB": KiB, "MiB": MiB, "GiB": GiB}


class OutOfMemoryReportedError(DoesNotFitError):
    """The report is written: the worker re-plans (the rank records no end of its own)."""


class FirstStepCounter:
    """On a CPU host whose plan names a capacity: live tensor bytes from loading through the first step, the
    peak standing in for a GPU's max_memory_allocated. Idle (None peak) elsewhere."""

    def __init__(self, cfg: RunConfig, has_gpu: bool) -> None:
        self._counter = LiveBytes() if not has_gpu and cfg.predicted.capacity_bytes else None
        if self._counter is not None:
            self._counter.__enter__()

    def stop(self) -> int | None:
        """Stop counting (idempotent); the peak, when it counted."""
        counter, self._counter = self._counter, None
        if counter is None:
            return None
        counter.__exit__(None, None, None)
        return counter.peak.bytes


def _across_ranks(value: int, device: Any) -> int:
    if not dist.is_initialized():
        return value
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def check_first_step(counter: FirstStepCounter, cfg: RunConfig, output_dir: Path, step: int, device: Any) -> int | None:
    """On a CPU host: the first step's peak (the largest of any rank); out of memory when it is past the plan's
    capacity."""
    peak = counter.stop()
    if peak is None:
        return None
    peak = _across_ranks(peak, device)
    capacity = cfg.predicted.capacity_bytes
    if peak > capacity:
        out_of_memory(output_dir, oom.Report(step, peak, capacity, "a CPU host: the first step's allocated peak, "
                                             "counted live, against prediction.fit.capacity_bytes"))
    return peak


def gpu_report(step: int, error: torch.OutOfMemoryError) -> oom.Report:
    """What a GPU's out-of-memory measured: the allocator's reserved peak plus the allocation that failed."""
    tried = _TRIED.search(str(error))
    tried_bytes = int(float(tried["amount"]) * _UNIT_BYTES[tried["unit"]]) if tried else 0
    device = torch.cuda.current_device()
    return oom.Report(step, torch.cuda.max_memory_reserved(device) + tried_bytes,
                      torch.cuda.get_device_properties(device).total_memory, "torch.OutOfMemoryError")


def out_of_memory(output_dir: Path, report: oom.Report) -> None:
    """Raise for a run out of memory: OutOfMemoryReportedError with the report written for a fleet worker to re-plan;
    DoesNotFitError with advice otherwise."""
    if os.environ.get(oom.REPLAN_ENV) == "1":
        oom.write_report(output_dir, report)
        raise OutOfMemoryReportedError(report.describe())
    raise DoesNotFitError(f"{report.describe()}; {ADVICE}")

"""Peak memory and throughput as a run measures them."""

from __future__ import annotations

import importlib.metadata
import resource
from dataclasses import dataclass, field

import torch

from executor.training.objective import StepLoss

_RU_MAXRSS_UNIT_BYTES = 1024  # Linux reports ru_maxrss in KiB (getrusage(2))


@dataclass(frozen=True)
class PeakMemory:
    gpu_allocated_bytes: int
    gpu_reserved_bytes: int
    host_bytes: int


def peak_memory() -> PeakMemory:
    allocated = reserved = 0
    if torch.cuda.is_available():
        allocated, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * _RU_MAXRSS_UNIT_BYTES
    return PeakMemory(allocated, reserved, host)


def reset_peak_memory() -> None:
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def relative_error(measured: float, predicted: float) -> float:
    """(predicted - measured) / measured: positive when the planner over-predicts."""
    return (predicted - measured) / measured if measured else 0.0


# The distributions whose versions a run's Feedback records (the memory model is exact against particular ones).
RECORDED_LIBRARIES = ("tunefleet", "torch", "transformers", "deepspeed", "peft", "trl", "accelerate")


def library_versions() -> dict[str, str]:
    """Installed version of each recorded library (those not installed are left out)."""
    found = {}
    for name in RECORDED_LIBRARIES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


@dataclass
class Window:
    """Loss, objective metrics, tokens and time since the last progress event (rank 0's micro-batches)."""

    loss_sum: torch.Tensor | float = 0.0
    micro_batches: int = 0
    tokens: int = 0
    started_s: float = 0.0
    metric_sums: dict[str, torch.Tensor] = field(default_factory=dict)
    metric_count: int = 0

    def add(self, step: StepLoss, tokens: int) -> None:
        self.loss_sum += step.loss.float()
        self.micro_batches += 1
        self.tokens += tokens
        for name, value in step.metrics.items():
            self.metric_sums[name] = self.metric_sums.get(name, 0.0) + value.float()
        self.metric_count += step.count

    def metrics(self) -> dict[str, float]:
        return {name: float(total) / self.metric_count for name, total in self.metric_sums.items()} \
            if self.metric_count else {}

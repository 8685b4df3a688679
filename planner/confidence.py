"""How sure Fit is: the range the per-GPU peak is likely in, from the benchmarks' measured error.

Three parts are uncertain in different ways. What PyTorch allocates is checked against the executor's own step
simulated at full size (make bench-simulate): its worst error for the regime bounds that part, and no tighter above
the plan than our GPU runs measured (the caching allocator counts as allocated what it rounds blocks up by). The caching
allocator's slack on top is checked against the allocator replayed on that step's allocations (the same benchmark's
reserved columns): its model's worst error bounds the reserved bytes. The CUDA context is not in the simulation; its
range is what nvidia-smi shows for an idle process (planner/constants.py). Pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.model import Architecture
from contract.schema import TrainingSpec
from planner import constants as k
from planner.memory import MemoryBreakdown


@dataclass(frozen=True)
class Band:
    low_bytes: int
    high_bytes: int
    basis: str


def allocated_error(a: Architecture, t: TrainingSpec) -> tuple[tuple[float, float], str]:
    """How far the allocated part has been found under and over the truth for the regime, and where from."""
    if t.zero_stage == 3:
        (under, over), source = k.SIMULATED_ERROR_ZERO3, "worst simulated ZeRO-3 rows, make bench-simulate"
    else:
        (under, over), source = k.SIMULATED_ERROR_ZERO0_TO_2, "worst simulated rows of ZeRO 0-2, make bench-simulate"
    if under < k.MEASURED_GPU_ALLOCATED_UNDER:
        return (k.MEASURED_GPU_ALLOCATED_UNDER, over), \
            f"{source}; above the plan as far as the caching allocator's rounding measured on our GPU runs, make " \
            "bench-accuracy"
    return (under, over), source


def band(b: MemoryBreakdown, a: Architecture, t: TrainingSpec) -> Band:
    allocated = b.allocated_bytes
    (under, over), source = allocated_error(a, t)
    slack_under, slack_over = k.SLACK_MODEL_ERROR
    context_low = b.cuda_context_bytes - k.OUTSIDE_ALLOCATOR_SPREAD_BYTES
    context_high = b.cuda_context_bytes + k.OUTSIDE_ALLOCATOR_SPREAD_BYTES
    slack = 0 if b.loading_decides_peak else b.allocator_bytes
    low = (allocated * (1 - over) + slack) * (1 - slack_over) + context_low
    high = (allocated * (1 + under) + slack) * (1 + slack_under) + context_high
    basis = (f"allocated -{over:.1%}/+{under:.1%} ({source}); reserved with the caching allocator's slack "
             f"-{slack_over:.1%}/+{slack_under:.1%} (its model against the allocator replayed on the simulated "
             f"step, make bench-simulate); outside the allocator (CUDA context, NCCL, kernels) "
             f"{context_low / k.MiB:.0f}-{context_high / k.MiB:.0f} MiB")
    return Band(int(low), int(high), basis)

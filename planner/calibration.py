"""Calibration from the fleet: what this fleet's own finished runs measured against what their plans predicted, per
GPU class, for the terms the simulation cannot see — how far the allocated peak lands from the prediction on these
GPUs, the caching allocator's slack (reserved over allocated), and the step time against the prediction.

`tunefleet calibrate` reads the executor's finished jobs (their Feedback) and writes a calibration file; the planner
reads it (`--calibration FILE`) and, for a GPU class with at least MIN_RUNS runs, plans Fit's likely range from
those runs instead of the third-party rows, says so ("calibrated on 37 runs of this fleet's a100-80gb"), gives the
probability that the job fits (the share of those runs whose error would still have fitted it), and scales the
step time by the class's measured ratio. Pure functions and the file's read and write.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from contract.errors import InvalidFieldError
from planner import constants as k

# Runs of a class before its calibration replaces the built-in range: fewer is an anecdote.
MIN_RUNS = 5
# Runs kept per class (the newest): enough for the tails, small enough to load in a millisecond.
MAX_RUNS_PER_CLASS = 1_000
CALIBRATION_FORMAT = 1


@dataclass(frozen=True)
class Run:
    """One finished run on a GPU, as ratios of measured to predicted (0: not measured)."""

    allocated_ratio: float  # measured max_memory_allocated / the plan's allocated prediction
    slack: float  # measured (reserved - allocated) / allocated
    step_time_ratio: float  # measured / predicted step time


@dataclass(frozen=True)
class ClassCalibration:
    gpu_class: str
    runs: tuple[Run, ...]

    @property
    def memory_runs(self) -> tuple[Run, ...]:
        return tuple(r for r in self.runs if r.allocated_ratio > 0)

    @property
    def step_time_ratio(self) -> float | None:
        """The median measured / predicted step time, when enough runs measured it."""
        ratios = [r.step_time_ratio for r in self.runs if r.step_time_ratio > 0]
        return statistics.median(ratios) if len(ratios) >= MIN_RUNS else None


def predicted_allocated(predicted_total_bytes: float, predicted_allocated_bytes: float = 0.0) -> float:
    """The allocated part of a plan's prediction: as the Feedback carries it, or (older Feedback) its total less the
    CUDA context and the slack those plans added (planner.memory until 2026-11-26: ALLOCATOR_OVERHEAD_FRACTION)."""
    if predicted_allocated_bytes:
        return predicted_allocated_bytes
    return max(0.0, (predicted_total_bytes - k.CUDA_CONTEXT_BYTES) / (1 + k.ALLOCATOR_OVERHEAD_FRACTION))


def run_of(predicted_total_bytes: float, measured_allocated_bytes: float, measured_reserved_bytes: float,
           predicted_step_s: float, measured_step_s: float, predicted_allocated_bytes: float = 0.0) -> Run:
    """A finished run's ratios from its Feedback's figures (each 0 when not measured, e.g. a CPU run)."""
    allocated = predicted_allocated(predicted_total_bytes, predicted_allocated_bytes)
    memory = measured_allocated_bytes > 0 and allocated > 0
    return Run(allocated_ratio=measured_allocated_bytes / allocated if memory else 0.0,
               slack=max(0.0, measured_reserved_bytes / measured_allocated_bytes - 1) if memory and
               measured_reserved_bytes else 0.0,
               step_time_ratio=measured_step_s / predicted_step_s if predicted_step_s > 0 and measured_step_s > 0
               else 0.0)


@dataclass(frozen=True)
class Likely:
    """Fit's range and what backs it, from a class's runs."""

    low_bytes: int
    high_bytes: int
    fit_probability: float
    basis: str


def likely(c: ClassCalibration, allocated_bytes: int, capacity_bytes: int, context_bytes: int) -> Likely | None:
    """The peak's range over the class's runs (each run's error applied to this job, `context_bytes` outside the
    allocator beside it), and the share of them under which it fits; None below MIN_RUNS runs that measured
    memory."""
    runs = c.memory_runs
    if len(runs) < MIN_RUNS:
        return None
    context_low = context_bytes - k.OUTSIDE_ALLOCATOR_SPREAD_BYTES
    context_high = context_bytes + k.OUTSIDE_ALLOCATOR_SPREAD_BYTES
    peaks = [allocated_bytes * r.allocated_ratio * (1 + r.slack) for r in runs]
    fitting = sum(1 for p in peaks if p + context_high <= capacity_bytes)
    ratios = [r.allocated_ratio for r in runs]
    slacks = [r.slack for r in runs]
    return Likely(int(min(peaks) + context_low), int(math.ceil(max(peaks) + context_high)), fitting / len(peaks),
                  f"calibrated on {len(runs)} runs of this fleet's {c.gpu_class}: allocated x{min(ratios):.3f}-"
                  f"{max(ratios):.3f} of the prediction, allocator slack {min(slacks):.0%}-{max(slacks):.0%}; "
                  f"outside the allocator {context_low / k.MiB:.0f}-{context_high / k.MiB:.0f} MiB")


def calibrate(samples: list[tuple[str, Run]]) -> dict[str, ClassCalibration]:
    """Runs by GPU class (the newest MAX_RUNS_PER_CLASS of each, in the order given: oldest first)."""
    by_class: dict[str, list[Run]] = {}
    for gpu_class, run in samples:
        by_class.setdefault(gpu_class, []).append(run)
    return {c: ClassCalibration(c, tuple(runs[-MAX_RUNS_PER_CLASS:])) for c, runs in sorted(by_class.items())}


def save(calibrations: dict[str, ClassCalibration], path: Path) -> None:
    document = {"format": CALIBRATION_FORMAT,
                "classes": {c: [asdict(r) for r in cal.runs] for c, cal in calibrations.items()}}
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(json.dumps(document, indent=1))
    partial.replace(path)


def load(path: Path) -> dict[str, ClassCalibration]:
    """InvalidFieldError naming the file when it is not a calibration tunefleet wrote."""
    try:
        document = json.loads(path.read_text())
        if document.get("format") != CALIBRATION_FORMAT:
            raise ValueError(f"format {document.get('format')!r}, not {CALIBRATION_FORMAT}")
        return {c: ClassCalibration(c, tuple(Run(float(r["allocated_ratio"]), float(r["slack"]),
                                                 float(r["step_time_ratio"])) for r in runs[-MAX_RUNS_PER_CLASS:]))
                for c, runs in document["classes"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise InvalidFieldError("calibration", f"{path} is not a calibration file 'tunefleet calibrate' wrote "
                                               f"({e}); write one with tunefleet calibrate --out FILE") from None

"""Estimate: wall time, GPU-hours and money for a whole job, as a range."""

from __future__ import annotations

from dataclasses import dataclass, replace

from contract.errors import InvalidFieldError
from contract.limits import MAX_TRAINING_TOKENS
from contract.model import ModelSpec
from contract.schema import Hardware, TrainingSpec, Workload
from planner import constants as k
from planner.calibration import ClassCalibration
from planner.throughput import StepTime, step_time, total_steps


@dataclass(frozen=True)
class Estimate:
    step: StepTime
    total_steps: int
    total_tokens: int
    duration_s: float
    duration_s_low: float
    duration_s_high: float
    hourly_usd: float
    gpus: int = 1
    priced: bool = True  # False: no price on record; the costs are 0 and mean unknown

    @property
    def gpu_hours(self) -> float:
        return self.duration_s / 3600 * self.gpus

    @property
    def cost_usd(self) -> float:
        return self.duration_s / 3600 * self.hourly_usd

    @property
    def cost_usd_low(self) -> float:
        return self.duration_s_low / 3600 * self.hourly_usd

    @property
    def cost_usd_high(self) -> float:
        return self.duration_s_high / 3600 * self.hourly_usd


def estimate(model: ModelSpec, t: TrainingSpec, hw: Hardware, workload: Workload) -> Estimate:
    step = step_time(model, t, hw)
    steps = total_steps(step.tokens_per_step, workload.dataset_tokens, workload.epochs, workload.max_steps)
    if steps * step.tokens_per_step > MAX_TRAINING_TOKENS:
        field = "workload.max_steps" if workload.max_steps else "workload.dataset_tokens"
        raise InvalidFieldError(field, f"{steps:,} steps of {step.tokens_per_step:,} tokens is more than "
                                       f"{MAX_TRAINING_TOKENS:.0e} tokens, beyond any training run; check the workload")
    train_s = steps * step.step_s
    startup = startup_s(hw)
    hourly = hw.hourly_usd_per_gpu * hw.world_size
    return Estimate(
        step=step, total_steps=steps, total_tokens=steps * step.tokens_per_step, duration_s=startup + train_s,
        duration_s_low=startup + train_s * k.DURATION_LOW_FACTOR,
        duration_s_high=startup + train_s * k.DURATION_HIGH_FACTOR, hourly_usd=hourly, gpus=hw.world_size,
        priced=hw.priced,
    )


def startup_s(hw: Hardware) -> float:
    """Loading, process start and first-step compilation, once per job: the class's own measured figure (a CPU host
    class), else the planner's."""
    return hw.gpu.startup_s or k.STARTUP_S


def calibrated(e: Estimate, cal: ClassCalibration | None) -> Estimate:
    """The estimate with its step time scaled by what the fleet's own runs of the class measured against their
    predictions (planner.calibration: the median, once enough runs measured it); unchanged otherwise."""
    ratio = cal.step_time_ratio if cal is not None else None
    if not ratio:
        return e
    s = e.step
    step = replace(s, compute_s=s.compute_s * ratio, communication_s=s.communication_s * ratio,
                   offload_s=s.offload_s * ratio, model_flops_utilization=s.model_flops_utilization / ratio)
    start = e.duration_s - e.total_steps * s.step_s  # the start-up the estimate counted
    scaled = [start + (d - start) * ratio for d in (e.duration_s, e.duration_s_low, e.duration_s_high)]
    return replace(e, step=step, duration_s=scaled[0], duration_s_low=scaled[1], duration_s_high=scaled[2])

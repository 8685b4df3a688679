"""The re-plan after an out-of-memory: the cheapest rung of the plan's allowed moves (contract.oom.ladder) whose
peak, predicted from the peak the run measured, fits the device.

A rung's peak is the measured peak plus what the memory model says the rung changes (its allocated bytes less
the current spec's): the planner's terms carry what a move frees (activations, gradients, optimizer states),
while the measurement carries what the model does not see on this host (the CUDA context, fragmentation, or on a
CPU host the absence of both)."""

from __future__ import annotations

from dataclasses import dataclass

from contract.model import Architecture
from contract.oom import Move, Report, ladder
from contract.schema import TrainingSpec
from planner import recipes
from planner.memory import gpu_memory


@dataclass(frozen=True)
class Replan:
    training: TrainingSpec
    predicted_bytes: int  # the rung's peak, from the measured one


@dataclass(frozen=True)
class NoRung:
    """Nothing the moves allow is predicted to fit: the last rung tried and what it would need."""

    tried: TrainingSpec
    predicted_bytes: int


def predicted_after(a: Architecture, before: TrainingSpec, after: TrainingSpec, world_size: int,
                    measured_bytes: int) -> int:
    return measured_bytes + gpu_memory(a, after, world_size).allocated_bytes - \
        gpu_memory(a, before, world_size).allocated_bytes


def replan(a: Architecture, t: TrainingSpec, world_size: int, report: Report,
           moves: tuple[Move, ...]) -> Replan | NoRung | None:
    """The cheapest rung predicted to fit report.capacity_bytes; NoRung when none is; None when the moves allow
    no change at all."""
    last: NoRung | None = None
    for rung in ladder(t, moves):
        if not recipes.covers(a, rung, world_size):  # a layout the planner refuses (8-bit LoRA under ZeRO-3)
            continue
        need = predicted_after(a, t, rung, world_size, report.measured_bytes)
        if need <= report.capacity_bytes:
            return Replan(rung, need)
        last = NoRung(rung, need)
    return last

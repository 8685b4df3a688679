"""Running out of GPU memory, as a plan's policy and as a report between a rank and its worker: which changes a
plan allows (`OomPolicy`), the ladder of training specs they lead to, cheapest first, and the file a rank writes
when a step ran out of memory (or, on a CPU host, when its first step's measured peak is past the plan's
capacity). Pure functions and the report's small read and write; the planner prices the rungs (planner.oom)."""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tunefleet.v1 import plan_pb2

from common.units import size
from contract.errors import PlanError, SpecError
from contract.limits import MAX_OOM_REPLANS
from contract.schema import Method, Offload, TrainingSpec

REPORT_FILE = "oom.json"
# Set by a fleet worker's launcher: a rank that runs out of memory writes its report and exits with
# RANK_EXIT_OUT_OF_MEMORY instead of failing the job, for the worker to re-plan.
REPLAN_ENV = "TUNEFLEET_OOM_REPLAN"
RANK_EXIT_OUT_OF_MEMORY = 5
DEFAULT_MAX_REPLANS = 3
# OOM_MOVE_SHORTER_SEQUENCES halves the sequence length down to this many tokens.
MIN_SEQUENCE_LENGTH = 128


class Move(enum.Enum):
    HALVE_MICRO_BATCH = plan_pb2.OOM_MOVE_HALVE_MICRO_BATCH
    GRADIENT_CHECKPOINTING = plan_pb2.OOM_MOVE_GRADIENT_CHECKPOINTING
    NEXT_ZERO_STAGE = plan_pb2.OOM_MOVE_NEXT_ZERO_STAGE
    OFFLOAD_OPTIMIZER = plan_pb2.OOM_MOVE_OFFLOAD_OPTIMIZER
    SHORTER_SEQUENCES = plan_pb2.OOM_MOVE_SHORTER_SEQUENCES
    QLORA = plan_pb2.OOM_MOVE_QLORA


# The moves that keep the training itself (its global batch, data and numerics), cheapest in throughput first.
DEFAULT_MOVES = (Move.HALVE_MICRO_BATCH, Move.GRADIENT_CHECKPOINTING, Move.NEXT_ZERO_STAGE, Move.OFFLOAD_OPTIMIZER)


@dataclass(frozen=True)
class Policy:
    moves: tuple[Move, ...] = DEFAULT_MOVES
    max_replans: int = DEFAULT_MAX_REPLANS
    disabled: bool = False


def policy_from_proto(p: plan_pb2.OomPolicy) -> Policy:
    """The plan's on_oom with its defaults filled in; a move named twice or unknown is a PlanError naming it."""
    moves = []
    for i, value in enumerate(p.moves):
        try:
            move = Move(value)
        except ValueError:
            raise PlanError(f"on_oom.moves[{i}]", f"is {value}, not a move; give one of "
                                                  f"{', '.join('OOM_MOVE_' + m.name for m in Move)}") from None
        if move in moves:
            raise PlanError(f"on_oom.moves[{i}]", f"names OOM_MOVE_{move.name} twice; list each move once")
        moves.append(move)
    if p.max_replans > MAX_OOM_REPLANS:
        raise PlanError("on_oom.max_replans", f"is {p.max_replans}; at most {MAX_OOM_REPLANS}")
    return Policy(tuple(moves) or DEFAULT_MOVES, p.max_replans or DEFAULT_MAX_REPLANS, p.disabled)


def _smaller_micro_batch(micro_batch: int) -> int:
    """The largest proper divisor: the global batch stays whole when accumulation grows by the quotient."""
    return next(d for d in range(micro_batch // 2, 0, -1) if micro_batch % d == 0)


def _apply(t: TrainingSpec, move: Move) -> TrainingSpec | None:
    """One rung of a move, or None when the move has nothing left to give."""
    if move is Move.HALVE_MICRO_BATCH and t.micro_batch_size > 1:
        smaller = _smaller_micro_batch(t.micro_batch_size)
        return replace(t, micro_batch_size=smaller,
                       gradient_accumulation_steps=t.gradient_accumulation_steps * (t.micro_batch_size // smaller))
    if move is Move.GRADIENT_CHECKPOINTING and not t.gradient_checkpointing:
        return replace(t, gradient_checkpointing=True)
    if move is Move.NEXT_ZERO_STAGE and t.zero_stage < 3:
        return replace(t, zero_stage=t.zero_stage + 1)
    if move is Move.OFFLOAD_OPTIMIZER and t.offload is Offload.NONE:
        return replace(t, offload=Offload.OPTIMIZER, zero_stage=max(1, t.zero_stage))  # DeepSpeed offloads from ZeRO 1
    if move is Move.SHORTER_SEQUENCES and t.sequence_length > MIN_SEQUENCE_LENGTH:
        return replace(t, sequence_length=max(MIN_SEQUENCE_LENGTH, t.sequence_length // 2))
    if move is Move.QLORA and t.method is Method.LORA:
        return replace(t, method=Method.QLORA)
    return None


def ladder(t: TrainingSpec, moves: tuple[Move, ...]) -> Iterator[TrainingSpec]:
    """Every spec the moves lead to, cheapest first: each move's rungs in turn (the micro-batch halved down to 1,
    the ZeRO stage up to 3), each on top of all the rungs before it."""
    for move in moves:
        while True:
            try:
                nxt = _apply(t, move)
            except SpecError:  # a spec the move cannot make of this one (QLoRA of a model in fp32, say)
                nxt = None
            if nxt is None:
                break
            t = nxt
            yield t


def changes(before: TrainingSpec, after: TrainingSpec) -> str:
    """What a re-plan changed, in words: "micro-batch 4 → 2, accumulation 8 → 16"."""
    said = []
    for name, field_name in (("micro-batch", "micro_batch_size"), ("accumulation", "gradient_accumulation_steps"),
                             ("ZeRO stage", "zero_stage"), ("sequence length", "sequence_length")):
        a, b = getattr(before, field_name), getattr(after, field_name)
        if a != b:
            said.append(f"{name} {a} → {b}")
    if after.gradient_checkpointing and not before.gradient_checkpointing:
        said.append("gradient checkpointing on")
    if after.offload is not before.offload:
        said.append(f"offload {before.offload.value} → {after.offload.value}")
    if after.method is not before.method:
        said.append(f"method {before.method.value} → {after.method.value}")
    return ", ".join(said) or "nothing"


def keeps_checkpoints(before: TrainingSpec, after: TrainingSpec) -> bool:
    """Whether a checkpoint of `before` loads into a run of `after` (DeepSpeed's layout is the ZeRO stage's and the
    offload's; the adapter is QLoRA's too)."""
    return (before.zero_stage, before.offload, before.method) == (after.zero_stage, after.offload, after.method)


@dataclass(frozen=True)
class Report:
    """A run out of memory: at which optimizer step, the peak it measured (allocated bytes plus the allocation
    that failed, on a GPU), what the device holds, and how it showed."""

    step: int
    measured_bytes: int
    capacity_bytes: int
    how: str

    def describe(self) -> str:
        return (f"out of memory at step {self.step}: {size(self.measured_bytes)} of {size(self.capacity_bytes)} "
                f"({self.how})")


def report_path(output_dir: Path) -> Path:
    return output_dir / REPORT_FILE


def write_report(output_dir: Path, report: Report) -> None:
    partial = report_path(output_dir).with_suffix(".tmp")
    partial.write_text(json.dumps(asdict(report)))
    os.replace(partial, report_path(output_dir))


def take_report(output_dir: Path) -> Report | None:
    """The report of the run that just ended, removed so that the next run starts clean; None when there is none
    (or it is unreadable)."""
    path = report_path(output_dir)
    try:
        fields = json.loads(path.read_text())
        return Report(int(fields["step"]), int(fields["measured_bytes"]), int(fields["capacity_bytes"]),
                      str(fields["how"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        path.unlink(missing_ok=True)

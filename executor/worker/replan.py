"""A run that ran out of memory is re-planned, not failed: the worker reads the rank's report (contract.oom), asks
the planner for the cheapest rung of the plan's allowed moves predicted to fit what the run measured
(planner.oom), stores the new plan as the job's, and gives the job back to its queue to run again from its last
checkpoint — up to the plan's bound, after which the job fails saying what was tried."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import structlog
from google.protobuf import json_format
from tunefleet.v1 import model_pb2, plan_pb2, progress_pb2

from common.units import size
from contract import oom
from contract import training as training_spec
from contract.errors import SpecError
from contract.model import Architecture
from contract.replan import with_training
from contract.schema import TrainingSpec
from executor.worker.supervision import Finished, Outcome, Requeue
from fleet.jobs import JobStore
from planner import convert
from planner.catalog import default_catalog
from planner.oom import NoRung, Replan, replan

log = structlog.get_logger()


@dataclass(frozen=True)
class _Run:
    plan: plan_pb2.Plan
    architecture: Architecture
    training: TrainingSpec
    world_size: int


def _architecture(plan: plan_pb2.Plan, work_dir: Path) -> Architecture:
    """The model's shape as the planner knows it: from the plan's model reference, else the config.json of the
    local model folder the run loaded."""
    ref = plan.model
    if ref.WhichOneof("source") is None:
        ref = model_pb2.ModelRef(config_json=(work_dir / ref.weights / "config.json").read_text(),
                                 weights=ref.weights)
    return convert.model_from_proto(ref, default_catalog()).architecture


def _read(plan_path: Path, work_dir: Path) -> _Run:
    plan = json_format.Parse(plan_path.read_text(), plan_pb2.Plan())
    world_size = (plan.hardware.gpus_per_node or 1) * (plan.hardware.nodes or 1)
    return _Run(plan, _architecture(plan, work_dir), training_spec.training_from_proto(plan.training, world_size),
                world_size)


def replanned(plan: plan_pb2.Plan, after: TrainingSpec, world_size: int, predicted_bytes: int) -> plan_pb2.Plan:
    """The plan with the rung's training (contract.replan), predicting the rung's peak."""
    new = with_training(plan, after, world_size)
    new.prediction.fit.per_gpu.total_bytes = predicted_bytes
    return new


def _set_aside(out: Path, replans: int) -> str:
    """Checkpoints of another ZeRO layout cannot load into the new plan: moved aside, never deleted."""
    checkpoints = out / "checkpoints"
    if not checkpoints.is_dir() or not any(checkpoints.iterdir()):
        return ""
    aside = out / f"checkpoints-before-replan-{replans}"
    checkpoints.rename(aside)
    return f"; its checkpoints (another ZeRO layout) moved to {aside}, the run starts again from step 0"


def after_out_of_memory(store: JobStore, job_id: str, fence: int, plan_path: Path, out: Path,
                        work_dir: Path) -> Outcome | None:
    """The outcome of a run that ended with an out-of-memory report; None when it did not."""
    report = oom.take_report(out)
    if report is None:
        return None
    done = store.record(job_id, ("oom_replans",)).oom_replans
    what = report.describe()
    try:
        run = _read(plan_path, work_dir)
        policy = oom.policy_from_proto(run.plan.on_oom)
    except (OSError, ValueError, json_format.ParseError, SpecError) as e:
        return Finished(progress_pb2.PHASE_FAILED, f"{what}; it could not be re-planned: {e}")
    if done >= policy.max_replans:
        return Finished(progress_pb2.PHASE_FAILED, f"{what}; gave up after {done} re-plan(s) (on_oom.max_replans); "
                                                  f"it last ran with {_summary(run.training)}")
    found = replan(run.architecture, run.training, run.world_size, report, policy.moves)
    if not isinstance(found, Replan):
        tried = (f"; the last rung allowed ({_summary(found.tried)}) would need "
                 f"{size(found.predicted_bytes)}" if isinstance(found, NoRung) else "")
        return Finished(progress_pb2.PHASE_FAILED,
                        f"{what}; no change on_oom allows is predicted to fit{tried}. Allow more moves in on_oom.moves "
                       "(OOM_MOVE_SHORTER_SEQUENCES, OOM_MOVE_QLORA change the training), or plan bigger GPUs")
    new = replanned(run.plan, found.training, run.world_size, found.predicted_bytes)
    # as the holder of `fence` (LeaseLostError when the job moved on): a stale holder neither re-plans nor sets aside
    store.record_replan(job_id, fence, new, done + 1)
    aside = "" if oom.keeps_checkpoints(run.training, found.training) else _set_aside(out, done + 1)
    message = (f"{what}; re-planned ({done + 1} of at most {policy.max_replans}): "
               f"{oom.changes(run.training, found.training)}; predicted {size(found.predicted_bytes)}"
               f"{aside}")
    log.warning("job.replanned", reason=message)
    return Requeue(message)


def _summary(t: TrainingSpec) -> str:
    return (f"micro-batch {t.micro_batch_size}, accumulation {t.gradient_accumulation_steps}, ZeRO {t.zero_stage}, "
            f"gradient checkpointing {'on' if t.gradient_checkpointing else 'off'}, offload {t.offload.value}, "
            f"sequence length {t.sequence_length}, {t.method.value}")

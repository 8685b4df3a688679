"""Runs now instead: for a queued job, the planner's answer on each GPU class with idle healthy hosts now (how many
GPUs of it, how long, what it costs at the fleet's prices), and the job re-planned for one of them (`tunefleet move
JOB --gpu-class C`). The planner runs in this process (planner.search, pure): the executor service needs no planner
service for it."""

from __future__ import annotations

from dataclasses import dataclass, replace

from tunefleet.v1 import executor_pb2, plan_pb2

from contract import training as training_spec
from contract.errors import PlanError, SpecError
from contract.replan import with_training
from fleet.record import JobRecord
from planner import convert
from planner.catalog import Catalog
from planner.search import Candidate, Constraints, half_precision, recommend

# Only the catalog's plain GPU counts: a fleet's hosts are not a provider's flavors.
FLEET_PROVIDER = "catalog"


@dataclass(frozen=True)
class IdleClass:
    gpu_class: str
    hosts: int
    gpus_per_host: int


def idle_classes(hosts: list[executor_pb2.Host]) -> list[IdleClass]:
    """Classes with a healthy host taking no job now, and the most GPUs one of them has."""
    found: dict[str, IdleClass] = {}
    for h in hosts:
        if h.running_job_id or h.quarantine_reason:
            continue
        was = found.get(h.gpu_class, IdleClass(h.gpu_class, 0, 0))
        found[h.gpu_class] = IdleClass(h.gpu_class, was.hosts + 1, max(was.gpus_per_host, h.gpu_count))
    return sorted(found.values(), key=lambda c: c.gpu_class)


def priced(catalog: Catalog, prices: dict[str, float]) -> Catalog:
    """The catalog at the fleet's own prices (its auth file's [prices]); the catalog's own where none is set."""
    table = prices
    if not table:
        return catalog
    gpus = tuple(replace(g, on_demand_hourly_usd=table[g.name], spot_hourly_usd=0.0, price_source="the fleet's price")
                 if g.name in table else g for g in catalog.gpus)
    return replace(catalog, gpus=gpus)


def best_on(plan: plan_pb2.Plan, gpu_class: str, max_gpus: int, priced: Catalog) -> Candidate | None:
    """The cheapest way the planner finds to run the plan on one host of `gpu_class` with up to `max_gpus` GPUs, at
    the prices of `priced`; None when none fits, or the plan's model is a folder only its workers can read (no
    catalog name or config.json in the plan)."""
    if max_gpus < 1:
        return None
    try:
        gpu = priced.gpu(gpu_class)
        model = convert.model_from_proto(plan.model, priced)
    except SpecError:
        return None
    t = training_spec.training_from_proto(plan.training, 1, default_precision=half_precision(gpu))
    found = recommend(model, t, convert.workload_from_proto(plan.workload),
                      Constraints(allowed_gpus=(gpu.name,), allowed_providers=(FLEET_PROVIDER,), max_gpus=max_gpus),
                      priced, limit=1)
    return found.candidates[0] if found.candidates else None


def alternative(c: Candidate) -> executor_pb2.Alternative:
    return executor_pb2.Alternative(gpu_class=c.fit.hardware.gpu.name, gpus_per_node=c.fit.hardware.gpus_per_node,
                                    duration_s=c.estimate.duration_s, cost_usd=c.estimate.cost_usd)


def moved(plan: plan_pb2.Plan, c: Candidate) -> plan_pb2.Plan:
    """The plan on the candidate's hardware and training layout, its data, output and hyperparameters kept."""
    hw = c.fit.hardware
    new = with_training(plan, c.fit.training, hw.world_size)
    new.hardware.CopyFrom(convert.hardware_to_proto(hw))
    new.prediction.CopyFrom(plan_pb2.Prediction(fit=convert.fit_to_proto(c.fit),
                                                estimate=convert.estimate_to_proto(c.estimate)))
    return new


def check_movable(record: JobRecord) -> None:
    """Only a job that waits in a queue and never wrote a checkpoint moves: a checkpoint is laid out for its
    ranks and ZeRO stage, which another class may change."""
    if record.retry_at_ms:
        raise PlanError("job_id", "waits out a retry backoff; move it once it is back in its queue")
    if record.checkpoint_step:
        raise PlanError("job_id", "has checkpoints of its layout on its class; cancel it and submit a new plan for "
                                  "the other class instead")

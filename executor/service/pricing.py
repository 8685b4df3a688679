"""What the fleet charges a job against its team's budget and how long it lets it run: from the fleet's own
prediction (planner.estimate on the plan's model, training, hardware and workload, in this process), through its
class's learned hold model (fleet.ledger), at the fleet's price — never the money figures or the timeout the caller
wrote in the plan. A plan the planner cannot predict (its model a folder only workers read, or a class the catalog
does not know) keeps its own duration for the commitment, bounded by the fleet's longest timeout; fleet.budget stops
such a run, as any, once it passes what it was budgeted while its team is over its budget."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tunefleet.v1 import plan_pb2

from contract import training as training_spec
from contract.errors import SpecError
from fleet import queues
from fleet.ledger import HoldModel
from planner import convert
from planner.catalog import Catalog
from planner.estimate import Estimate, estimate
from planner.search import half_precision

# A plan's own upper duration further than this factor from the fleet's prediction, either way, is corrected (the
# fleet's figures are stored) and the correction is said in the audit log.
DISAGREEMENT_FACTOR = 2.0


@dataclass(frozen=True)
class JobPrice:
    """What the fleet stores of a job's prediction and price."""

    price_usd_per_gpu_hour: float
    predicted_s: tuple[float, float, float]  # most likely, low, high: its run, as the fleet predicts it
    cost_high_usd: float  # the upper end of its hold (the class's hold model over predicted high) × GPUs × price
    timeout_s: int
    note: str = ""  # what the audit log says of the prediction (a correction, or why the plan's own stands)


def fleet_estimate(plan: plan_pb2.Plan, catalog: Catalog) -> Estimate | None:
    """The planner's estimate of the plan as it stands (its hardware, training and workload); None when the planner
    cannot read its model or hardware (a model folder only workers read; a class outside the catalog)."""
    try:
        hw = convert.hardware_from_proto(plan.hardware, catalog)
        model = convert.model_from_proto(plan.model, catalog)
        t = training_spec.training_from_proto(plan.training, hw.world_size, default_precision=half_precision(hw.gpu))
        return estimate(model, t, hw, convert.workload_from_proto(plan.workload))
    except (SpecError, ValueError):
        return None


def _hours(s: float) -> str:
    return f"{s / 3600:,.2f} h"


def job_price(plan: plan_pb2.Plan, catalog: Catalog, price_usd_per_gpu_hour: float, gpus_total: int,
              hold: HoldModel) -> JobPrice:
    """The job's prediction, commitment and timeout as the fleet sets them."""
    claimed = plan.prediction.estimate
    found = fleet_estimate(plan, catalog)
    if found is None:
        high_s = claimed.duration_s_high if math.isfinite(claimed.duration_s_high) else 0.0
        timeout_s = min(queues.job_timeout_s(claimed.duration_s), queues.DEFAULT_JOB_TIMEOUT_S)
        return JobPrice(price_usd_per_gpu_hour,
                        (max(0.0, claimed.duration_s), max(0.0, claimed.duration_s_low), max(0.0, high_s)),
                        max(0.0, high_s) / 3600 * gpus_total * price_usd_per_gpu_hour, timeout_s,
                        note="; the planner cannot predict this plan (its model or GPU class is not in the catalog): "
                             "its own duration is committed, and the run is stopped past it if the team is over budget")
    predicted = (found.duration_s, found.duration_s_low, found.duration_s_high)
    held_high_s = hold.held_s(found.duration_s_high)
    note = ""
    if not (found.duration_s_high / DISAGREEMENT_FACTOR <= claimed.duration_s_high
            <= found.duration_s_high * DISAGREEMENT_FACTOR):
        note = (f"; the plan said up to {_hours(claimed.duration_s_high)}, the fleet predicts up to "
                f"{_hours(found.duration_s_high)} and prices and times it by that")
    return JobPrice(price_usd_per_gpu_hour, predicted, held_high_s / 3600 * gpus_total * price_usd_per_gpu_hour,
                    queues.job_timeout_s(hold.held_s(found.duration_s)), note=note)

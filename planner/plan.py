"""Turn a chosen configuration into an executable Plan."""

from __future__ import annotations

import json
import uuid

from google.protobuf import timestamp_pb2
from tunefleet.v1 import model_pb2, plan_pb2, training_pb2

from contract import training as training_spec
from contract.deepspeed_config import DEFAULT_LEARNING_RATE, DEFAULT_WARMUP_STEPS, deepspeed_config
from contract.run_config import default_output
from planner import convert
from planner.estimate import Estimate
from planner.fit import FitResult

DEFAULT_CHECKPOINT_EVERY_STEPS = 200
DEFAULT_SEED = 42


def build_plan(model_ref: model_pb2.ModelRef, fit: FitResult, est: Estimate, workload: training_pb2.WorkloadSpec,
               dataset: plan_pb2.DatasetRef, now: timestamp_pb2.Timestamp, plan_id: str = "") -> plan_pb2.Plan:
    t, hw = fit.training, fit.hardware
    ds = deepspeed_config(t, hw.world_size, total_steps=est.total_steps)
    plan_id = plan_id or uuid.uuid4().hex
    return plan_pb2.Plan(
        plan_id=plan_id, model=model_ref, dataset=dataset, training=training_spec.training_to_proto(t),
        hardware=convert.hardware_to_proto(hw), workload=workload,
        hyperparameters=plan_pb2.Hyperparameters(
            learning_rate=DEFAULT_LEARNING_RATE, warmup_ratio=min(1.0, DEFAULT_WARMUP_STEPS / est.total_steps),
            max_grad_norm=ds["gradient_clipping"], seed=DEFAULT_SEED,
            checkpoint_every_steps=DEFAULT_CHECKPOINT_EVERY_STEPS),
        deepspeed_config_json=json.dumps(ds, sort_keys=True), output_uri=default_output(plan_id),
        prediction=plan_pb2.Prediction(fit=convert.fit_to_proto(fit), estimate=convert.estimate_to_proto(est)),
        created_at=now)

"""A plan run with another training spec, the rest of it as it was: the worker's re-plan after an out-of-memory
(executor.worker.replan) and the service's move of a queued job to another GPU class (executor.service.moves)."""

from __future__ import annotations

import json

from tunefleet.v1 import plan_pb2

from contract import training as training_spec
from contract.deepspeed_config import deepspeed_config
from contract.schema import TrainingSpec

# The DeepSpeed keys a training spec decides; the rest (the optimizer, its schedule, clipping) stays the plan's.
SPEC_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size", "zero_optimization",
             "fp16", "bf16", "data_types")


def with_training(plan: plan_pb2.Plan, after: TrainingSpec, world_size: int) -> plan_pb2.Plan:
    """A copy of the plan running `after` on `world_size` ranks: the DeepSpeed keys the spec decides regenerated,
    the run's optimizer, schedule and hyperparameters kept."""
    new = plan_pb2.Plan()
    new.CopyFrom(plan)
    new.training.CopyFrom(training_spec.training_to_proto(after))
    config = json.loads(plan.deepspeed_config_json)
    generated = deepspeed_config(after, world_size)
    for key in SPEC_KEYS:
        config.pop(key, None)
        if key in generated:
            config[key] = generated[key]
    new.deepspeed_config_json = json.dumps(config, sort_keys=True)
    return new

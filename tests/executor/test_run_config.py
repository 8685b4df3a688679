"""Plan validation: every refusal names the plan field to change (pure, no torch)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tunefleet.v1 import plan_pb2, training_pb2

from contract.errors import PlanError
from contract.run_config import DatasetFormat, parse_plan, run_config_from_plan
from devtools.tiny import make_plan
from tests.executor.plan_edits import clear_field, edit_deepspeed, set_field


def _plan() -> plan_pb2.Plan:
    return make_plan(Path("/models/tiny"), Path("/data/train.jsonl"), Path("/runs/x"), ranks=2, zero_stage=3)


@pytest.mark.parametrize(("change", "field", "words"), [
    (set_field("training.sequence_length", 0), "training.sequence_length", "positive"),
    (set_field("training.micro_batch_size", 0), "training.micro_batch_size", "positive"),
    (set_field("training.method", training_pb2.METHOD_UNSPECIFIED), "training.method", "not set"),
    (clear_field("training.zero_stage"), "training.zero_stage", "not set"),
    (set_field("training.objective", training_pb2.OBJECTIVE_DPO), "dataset.format", "preference pairs"),
    (set_field("dataset.format", plan_pb2.DATASET_FORMAT_PREFERENCE), "dataset.format", "objective dpo"),
    (lambda p: (set_field("training.objective", training_pb2.OBJECTIVE_DPO)(p),
                set_field("dataset.format", plan_pb2.DATASET_FORMAT_PREFERENCE)(p),
                set_field("training.image_tokens", 16)(p)), "training.objective", "vision-language"),
    (lambda p: (set_field("training.objective", training_pb2.OBJECTIVE_DPO)(p),
                set_field("dataset.format", plan_pb2.DATASET_FORMAT_PREFERENCE)(p),
                set_field("dataset.packing", True)(p)), "dataset.packing", "not packed"),
    (set_field("training.dpo.beta", 0.5), "training.dpo", "objective is not dpo"),
    (lambda p: (set_field("training.objective", training_pb2.OBJECTIVE_DPO)(p),
                set_field("dataset.format", plan_pb2.DATASET_FORMAT_PREFERENCE)(p),
                set_field("training.dpo.label_smoothing", 0.5)(p)), "training.dpo.label_smoothing", "0.5"),
    (set_field("training.optimizer", training_pb2.OPTIMIZER_ADAMW_8BIT), "training.optimizer", "adamw"),
    (set_field("training.precision", training_pb2.PRECISION_BF16_PURE), "training.precision", "plan with bf16"),
    (set_field("training.recipe", training_pb2.RECIPE_HF_TRAINER), "training.recipe", "plan with recipe tunefleet"),
    (set_field("training.recipe", training_pb2.RECIPE_TRL_SFT), "training.recipe", "plan with recipe tunefleet"),
    (set_field("training.loss", training_pb2.LOSS_CHUNKED), "training.loss", "--loss standard"),
    (lambda p: (set_field("training.sharding", training_pb2.SHARDING_FSDP)(p), set_field("training.zero_stage", 3)(p)),
     "training.sharding", "plan with sharding deepspeed"),
    (set_field("hardware.nodes", 65), "hardware.nodes", "at most 64 hosts"),
    (set_field("plan_id", "../etc"), "plan_id", "letters"),
    (set_field("model.weights", ""), "model.weights", "model id"),
    (lambda p: (set_field("output_uri", "s3://bucket/run")(p), set_field("hardware.nodes", 2)(p)), "output_uri",
     "every node mounts"),  # one node may store its output in object storage; a gang's write one checkpoint
    (set_field("deepspeed_config_json", ""), "deepspeed_config_json", "empty"),
    (set_field("deepspeed_config_json", "{not json"), "deepspeed_config_json", "JSON"),
    (edit_deepspeed(train_micro_batch_size_per_gpu=8), "deepspeed_config_json", "train_micro_batch_size_per_gpu"),
    (edit_deepspeed(train_batch_size=2), "deepspeed_config_json", "train_batch_size is 2"),
    (edit_deepspeed(zero_optimization={"stage": 1}), "deepspeed_config_json", "ZeRO stage 1"),
    (lambda p: p.ClearField("dataset"), "dataset", "local_path"),
    (set_field("dataset.local_path", ""), "dataset.local_path", "JSONL"),
])
def test_bad_plans_name_the_field(change: Callable[[plan_pb2.Plan], None], field: str, words: str) -> None:
    plan = _plan()
    change(plan)
    with pytest.raises(PlanError) as info:
        run_config_from_plan(plan)
    assert info.value.field == field
    assert words in info.value.description


def test_a_good_plan_resolves_every_default() -> None:
    cfg = run_config_from_plan(_plan(), output_dir="file:///tmp/out")
    assert cfg.world_size == 2
    assert cfg.training.zero_stage == 3
    assert cfg.dataset.format is DatasetFormat.TEXT and cfg.dataset.split == "train"
    assert cfg.output_dir == Path("/tmp/out")
    assert cfg.checkpoint_dir == Path("/tmp/out/checkpoints")
    assert cfg.deepspeed_config["train_batch_size"] == 2 * 2


def test_plan_round_trips_through_json_and_binary() -> None:
    from google.protobuf import json_format

    plan = _plan()
    assert parse_plan(json_format.MessageToJson(plan)) == plan
    assert parse_plan(plan.SerializeToString()) == plan
    with pytest.raises(PlanError, match="not a tunefleet.v1.Plan"):
        parse_plan('{"plan_id": 3, "nonsense": true}', "plan.json")


def test_the_run_keeps_the_plan_s_allocated_prediction_for_its_feedback() -> None:
    plan = _plan()
    g = plan.prediction.fit.per_gpu
    g.total_bytes, g.cuda_context_bytes, g.allocator_bytes = 30 * 2**30, 600 * 2**20, 2 * 2**30
    predicted = run_config_from_plan(plan, output_dir="file:///tmp/out").predicted
    assert predicted.peak_gpu_memory_bytes == 30 * 2**30
    assert predicted.allocated_gpu_memory_bytes == 30 * 2**30 - 600 * 2**20 - 2 * 2**30
    assert run_config_from_plan(_plan(), output_dir="file:///tmp/out").predicted.allocated_gpu_memory_bytes == 0

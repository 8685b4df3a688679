"""The out-of-memory policy (contract.oom) and the planner's pick of a rung (planner.oom): pure, table-driven."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tunefleet.v1 import plan_pb2

from contract import oom
from contract.errors import PlanError
from contract.schema import Method, Offload, Precision, TrainingSpec
from executor.worker.replan import replanned
from planner.catalog import default_catalog
from planner.memory import gpu_memory
from planner.oom import NoRung, Replan, replan

BASE = TrainingSpec(method=Method.LORA, precision=Precision.BF16, micro_batch_size=8, sequence_length=2048,
                    gradient_accumulation_steps=2, gradient_checkpointing=False, zero_stage=0)
LLAMA = default_catalog().model("meta-llama/Llama-3.1-8B").architecture


@pytest.mark.parametrize(("moves", "rungs"), [
    ((oom.Move.HALVE_MICRO_BATCH,), [(4, 4), (2, 8), (1, 16)]),
    ((oom.Move.GRADIENT_CHECKPOINTING, oom.Move.NEXT_ZERO_STAGE), ["ckpt", "z1", "z2", "z3"]),
    ((oom.Move.OFFLOAD_OPTIMIZER, oom.Move.QLORA, oom.Move.SHORTER_SEQUENCES),
     ["offload", "qlora", "seq1024", "seq512", "seq256", "seq128"]),
])
def test_the_ladder_walks_each_move_to_its_end_on_top_of_the_ones_before(moves: tuple[oom.Move, ...],
                                                                          rungs: list[object]) -> None:
    said = []
    for t in oom.ladder(BASE, moves):
        if oom.Move.HALVE_MICRO_BATCH in moves:
            said.append((t.micro_batch_size, t.gradient_accumulation_steps))
            assert t.micro_batch_size * t.gradient_accumulation_steps == 16, "the global batch is kept"
        else:
            said.append(next(name for name, holds in (
                ("seq" + str(t.sequence_length), t.sequence_length < BASE.sequence_length),
                ("qlora", t.method is Method.QLORA), ("offload", t.offload is Offload.OPTIMIZER and
                                                      t.method is Method.LORA),
                ("z" + str(t.zero_stage), t.zero_stage > 0), ("ckpt", t.gradient_checkpointing)) if holds))
    assert said == rungs


def test_a_micro_batch_that_does_not_halve_steps_to_its_largest_divisor() -> None:
    t = replace(BASE, micro_batch_size=6, gradient_accumulation_steps=1)
    assert [(r.micro_batch_size, r.gradient_accumulation_steps)
            for r in oom.ladder(t, (oom.Move.HALVE_MICRO_BATCH,))] == [(3, 2), (1, 6)]


def test_a_move_with_nothing_left_to_give_adds_no_rung() -> None:
    done = replace(BASE, micro_batch_size=1, gradient_checkpointing=True, zero_stage=3, offload=Offload.OPTIMIZER)
    assert list(oom.ladder(done, oom.DEFAULT_MOVES)) == []


@pytest.mark.parametrize(("policy", "field", "words"), [
    (plan_pb2.OomPolicy(moves=[1, 1]), "on_oom.moves[1]", "twice"),
    (plan_pb2.OomPolicy(moves=[1, 99]), "on_oom.moves[1]", "not a move"),
    (plan_pb2.OomPolicy(max_replans=17), "on_oom.max_replans", "at most 16"),
])
def test_a_policy_that_cannot_be_followed_is_refused_naming_the_field(policy: plan_pb2.OomPolicy, field: str,
                                                                      words: str) -> None:
    with pytest.raises(PlanError) as e:
        oom.policy_from_proto(policy)
    assert e.value.field == field and words in str(e.value)


def test_an_empty_policy_means_the_moves_that_keep_the_training() -> None:
    p = oom.policy_from_proto(plan_pb2.OomPolicy())
    assert p.moves == oom.DEFAULT_MOVES and p.max_replans == oom.DEFAULT_MAX_REPLANS and not p.disabled
    assert oom.Move.SHORTER_SEQUENCES not in p.moves and oom.Move.QLORA not in p.moves


def test_what_changed_is_said_in_words_and_checkpoints_survive_only_the_same_layout() -> None:
    halved = replace(BASE, micro_batch_size=4, gradient_accumulation_steps=4)
    assert oom.changes(BASE, halved) == "micro-batch 8 → 4, accumulation 2 → 4"
    assert oom.keeps_checkpoints(BASE, halved)
    assert oom.keeps_checkpoints(BASE, replace(BASE, gradient_checkpointing=True))
    assert not oom.keeps_checkpoints(BASE, replace(BASE, zero_stage=1))
    assert not oom.keeps_checkpoints(BASE, replace(BASE, zero_stage=1, offload=Offload.OPTIMIZER))
    assert oom.changes(BASE, replace(BASE, zero_stage=2, offload=Offload.OPTIMIZER)) == \
        "ZeRO stage 0 → 2, offload none → optimizer"
    assert [oom.changes(BASE, r) for r in oom.ladder(BASE, (oom.Move.OFFLOAD_OPTIMIZER,))] == \
        ["ZeRO stage 0 → 1, offload none → optimizer"], "DeepSpeed offloads from ZeRO 1 on"


def test_a_report_round_trips_once(tmp_path: Path) -> None:
    report = oom.Report(step=1, measured_bytes=3 * 2**30, capacity_bytes=2**31, how="torch.OutOfMemoryError")
    oom.write_report(tmp_path, report)
    assert oom.take_report(tmp_path) == report
    assert oom.take_report(tmp_path) is None, "taken: the next run starts clean"
    assert report.describe() == "out of memory at step 1: 3.00 GiB of 2.00 GiB (torch.OutOfMemoryError)"


def _measured(t: TrainingSpec) -> int:
    """A host that holds exactly what the model predicts, plus a fixed 1 GiB the model does not see."""
    return gpu_memory(LLAMA, t, 1).allocated_bytes + 2**30


def test_the_cheapest_rung_predicted_to_fit_is_chosen_from_what_was_measured() -> None:
    # a capacity between micro-batch 2's need and micro-batch 4's: two rungs down, in one re-plan
    need = {mb: _measured(replace(BASE, micro_batch_size=mb, gradient_accumulation_steps=16 // mb)) for mb in (4, 2)}
    capacity = (need[4] + need[2]) // 2
    report = oom.Report(1, _measured(BASE), capacity, "test")
    found = replan(LLAMA, BASE, 1, report, oom.DEFAULT_MOVES)
    assert isinstance(found, Replan)
    assert (found.training.micro_batch_size, found.training.gradient_accumulation_steps) == (2, 8)
    assert found.predicted_bytes == need[2] <= capacity


def test_no_rung_that_fits_names_the_last_one_tried() -> None:
    report = oom.Report(1, _measured(BASE), 2**30, "test")  # less than the weights
    found = replan(LLAMA, BASE, 1, report, (oom.Move.HALVE_MICRO_BATCH,))
    assert isinstance(found, NoRung) and found.tried.micro_batch_size == 1 and found.predicted_bytes > 2**30
    assert replan(LLAMA, replace(BASE, micro_batch_size=1), 1, report, (oom.Move.HALVE_MICRO_BATCH,)) is None


def test_the_new_plan_carries_the_rung_into_its_deepspeed_config_and_keeps_the_rest() -> None:
    import json

    from contract import training as training_spec
    from contract.deepspeed_config import deepspeed_config

    config = deepspeed_config(BASE, 2, learning_rate=3e-4, warmup_steps=5, total_steps=100)
    plan = plan_pb2.Plan(plan_id="p", training=training_spec.training_to_proto(BASE),
                         deepspeed_config_json=json.dumps(config))
    after = replace(BASE, micro_batch_size=4, gradient_accumulation_steps=4, zero_stage=2)
    new = replanned(plan, after, 2, predicted_bytes=123)
    ds = json.loads(new.deepspeed_config_json)
    assert (ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"], ds["train_batch_size"]) == \
        (4, 4, 32)
    assert ds["zero_optimization"]["stage"] == 2
    assert ds["optimizer"] == config["optimizer"] and ds["scheduler"] == config["scheduler"]
    assert new.training.micro_batch_size == 4 and new.prediction.fit.per_gpu.total_bytes == 123

"""Issue 9, executor items 8, 9 and 11: plan files and plans that used to print a traceback, pass `--check` with
absurd values, or reach outside the run's directories are refused with the field named (pure, no torch)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from google.protobuf import json_format
from tunefleet.v1 import plan_pb2

from contract.errors import PlanError
from contract.paths import DATA_ROOTS_ENV, OUTPUT_ROOTS_ENV, Roots
from contract.run_config import parse_plan, run_config_from_plan
from devtools.tiny import make_plan
from tests.executor.plan_edits import edit_deepspeed


def _plan(root: Path = Path("/srv/tf")) -> plan_pb2.Plan:
    return make_plan(root / "models" / "tiny", root / "data" / "train.jsonl", root / "runs" / "x")


def _json(plan: plan_pb2.Plan) -> dict[str, object]:
    return json.loads(json_format.MessageToJson(plan))  # type: ignore[no-any-return]


def _refusal(text: str | bytes) -> PlanError:
    with pytest.raises(PlanError) as info:
        run_config_from_plan(parse_plan(text, "plan.json"))
    return info.value


def _edit_json(edit: Callable[[dict[str, object]], None]) -> str:
    fields = _json(_plan())
    edit(fields)
    return json.dumps(fields)


@pytest.mark.parametrize(("text", "field", "words"), [
    (b"\x00\x01\xffnot a plan at all", "plan.json", "neither a JSON plan"),
    (b"\x08\x96\x01\x12", "plan.json", "neither a JSON plan"),
    ("[" * 100_000, "plan.json", "nests deeper"),  # text (not bytes) is always parsed as JSON
    ('{"planId": "x", "model": ' + '{"a": ' * 50_000 + "1" + "}" * 50_000 + "}", "plan.json", "nests deeper"),
    ('{"planId": "' + "9" * 200 + '"}', "plan_id", "letters"),
    ('{"workload": {"epochs": ' + "9" * 5000 + "}}", "plan.json", "digits"),
    (_edit_json(lambda f: f["workload"].update(epochs="NaN")), "workload.epochs", "finite"),  # type: ignore
    (_edit_json(lambda f: f["workload"].update(epochs="Infinity")), "workload.epochs", "finite"),  # type: ignore
    (_edit_json(lambda f: f.update(training={"microBatchSize": "many"})), "plan.json", "microBatchSize"),
])
def test_plan_files_that_are_not_plans_are_refused_with_the_reason(text: str | bytes, field: str,
                                                                  words: str) -> None:
    e = _refusal(text if isinstance(text, bytes) else text)
    assert e.field == field and words in e.description, e


def _with(change: Callable[[plan_pb2.Plan], None]) -> plan_pb2.Plan:
    plan = _plan()
    change(plan)
    return plan


def _ds(config: object) -> Callable[[plan_pb2.Plan], None]:
    def apply(plan: plan_pb2.Plan) -> None:
        plan.deepspeed_config_json = config if isinstance(config, str) else json.dumps(config)
    return apply


@pytest.mark.parametrize(("change", "field", "words"), [
    (lambda p: setattr(p.workload, "max_steps", 2 ** 64 - 1), "workload.max_steps", "outside"),
    (lambda p: setattr(p.training, "sequence_length", 2 ** 32 - 1), "training.sequence_length", "outside"),
    (lambda p: setattr(p.training.lora, "rank", 10 ** 9), "training.lora.rank", "outside"),
    (lambda p: setattr(p.training.lora, "alpha", math.nan), "training.lora.alpha", "finite"),
    (lambda p: setattr(p.hyperparameters, "learning_rate", -math.inf), "hyperparameters.learning_rate", "finite"),
    (lambda p: setattr(p.hyperparameters, "learning_rate", -1.0), "hyperparameters.learning_rate", "outside"),
    (lambda p: setattr(p.workload, "epochs", math.nan), "workload.epochs", "finite"),
    (lambda p: setattr(p, "output_uri", "o" * 5000), "output_uri", "characters"),
    (_ds({}), "deepspeed_config_json", "lacks train_micro_batch_size_per_gpu"),
    (edit_deepspeed(zero_optimization=[]), "deepspeed_config_json", "'zero_optimization' must be a JSON object"),
    (edit_deepspeed(tensorboard={"enabled": True, "output_path": "/etc"}), "deepspeed_config_json",
     "key 'tensorboard'"),
    (edit_deepspeed(zero_optimization={"stage": 2, "offload_optimizer": {"device": "nvme"}}),
     "deepspeed_config_json", "tunefleet offloads to 'cpu'"),
    (edit_deepspeed(zero_optimization={"stage": 2, "offload_optimizer": {"device": "cpu", "nvme_path": "/"}}),
     "deepspeed_config_json", "key 'zero_optimization.offload_optimizer.nvme_path'"),
    (edit_deepspeed(gradient_clipping="1.0"), "deepspeed_config_json", "'gradient_clipping' must be a number"),
    (edit_deepspeed(bf16={"enabled": 1}), "deepspeed_config_json", "'bf16.enabled' must be true or false"),
    (_ds('{"a": ' * 20 + "1" + "}" * 20), "deepspeed_config_json", "nests deeper"),
    (_ds('{"train_batch_size": NaN}'), "deepspeed_config_json", "NaN"),
])
def test_absurd_values_and_unknown_deepspeed_keys_are_refused_by_name(change: Callable[[plan_pb2.Plan], None],
                                                                     field: str, words: str) -> None:
    with pytest.raises(PlanError) as info:
        run_config_from_plan(_with(change))
    assert info.value.field == field and words in info.value.description, info.value


def test_the_planners_own_deepspeed_configs_pass_the_allow_list() -> None:
    for stage in (0, 1, 2, 3):
        plan = make_plan(Path("/m"), Path("/d.jsonl"), Path("/o"), zero_stage=stage, ranks=2)
        assert run_config_from_plan(plan).deepspeed_config["zero_optimization"]["stage"] == stage


def _confine(plan: plan_pb2.Plan, roots: Roots) -> None:
    from executor.training.launcher import confine  # the training stack: torch is installed with the suite

    confine(run_config_from_plan(plan), roots)


OUTSIDE = "outside this host's"


@pytest.mark.parametrize(("change", "field", "words"), [
    (lambda p: setattr(p, "output_uri", "/"), "output_uri", "(or root) itself"),
    (lambda p: setattr(p, "output_uri", "file:///etc"), "output_uri", OUTSIDE),
    (lambda p: setattr(p, "output_uri", "/srv/tf/runs/../../../etc"), "output_uri", "climbs out with '..'"),
    (lambda p: setattr(p.dataset, "local_path", "/etc/hostname"), "dataset.local_path", OUTSIDE),
    (lambda p: setattr(p.dataset, "local_path", "/srv/tf/data/../../../etc/passwd"), "dataset.local_path", OUTSIDE),
    (lambda p: setattr(p.dataset, "hub_name", "/etc"), "dataset.hub_name", OUTSIDE),
    (lambda p: setattr(p.model, "weights", "/root"), "model.weights", OUTSIDE),
])
def test_paths_outside_the_hosts_roots_are_refused(change: Callable[[plan_pb2.Plan], None], field: str,
                                                   words: str) -> None:
    roots = Roots((Path("/srv/tf/data").resolve(), Path("/srv/tf/models").resolve()), (Path("/srv/tf/runs"),))
    _confine(_plan(), roots)  # the plan as made reads and writes inside them
    with pytest.raises(PlanError) as info:
        _confine(_with(change), roots)
    assert info.value.field == field and words in info.value.description


def test_a_symlink_cannot_lead_a_run_out_of_its_roots(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "escape").symlink_to("/etc")
    roots = Roots((tmp_path,), (runs,))
    with pytest.raises(PlanError) as info:
        roots.writable("output_uri", runs / "escape" / "x")
    assert "resolves to '/etc/x'" in info.value.description
    assert roots.writable("output_uri", runs / "job") == (runs / "job").resolve()


def test_roots_default_to_the_current_directory_and_come_from_the_environment(tmp_path: Path) -> None:
    assert Roots.from_environment({}, default=tmp_path) == Roots((tmp_path.resolve(),), (tmp_path.resolve(),))
    env = {DATA_ROOTS_ENV: f"{tmp_path}/a:{tmp_path}/b", OUTPUT_ROOTS_ENV: f"{tmp_path}/o"}
    roots = Roots.from_environment(env, default=Path("/"))
    assert roots.data == (tmp_path / "a", tmp_path / "b") and roots.output == (tmp_path / "o",)
    assert Roots.from_environment({DATA_ROOTS_ENV: os.pathsep.join(map(str, roots.data)),
                                   OUTPUT_ROOTS_ENV: os.pathsep.join(map(str, roots.output))}) == roots

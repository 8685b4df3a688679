"""Issue 23, items 1, 3 and 5: one job's output directory is never another's, its data's or the work dir's; one
id rule for plans and fleet jobs; paths with control characters are refused by field (pure, no torch)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tunefleet.v1 import plan_pb2

from contract.errors import PlanError
from contract.ownership import OWNER_FILE, check_output, claim_output
from contract.run_config import run_config_from_plan
from devtools.tiny import make_plan


def _refused(fn, *args) -> PlanError:  # type: ignore[no-untyped-def]
    with pytest.raises(PlanError) as info:
        fn(*args)
    assert info.value.field == "output_uri"
    return info.value


def test_a_claimed_directory_admits_only_its_owner(tmp_path: Path) -> None:
    out = claim_output(tmp_path / "runs" / "ok-1", "ok-1")
    assert (out / OWNER_FILE).read_text().strip() == "ok-1"
    assert claim_output(tmp_path / "runs" / "ok-1", "ok-1") == out  # a rerun of the same job goes back in
    refused = _refused(claim_output, out, "other").description
    assert "the output of another job" in refused and "ok-1" not in refused, "the owner may be another team's"
    (out / "checkpoints" / "step-00000008").mkdir(parents=True)
    inside = _refused(claim_output, out / "checkpoints" / "step-00000008", "other")
    assert "lies inside" in inside.description and "ok-1" not in inside.description.replace(str(out), "")
    assert not (out / "checkpoints" / "step-00000008" / OWNER_FILE).exists()


def test_the_root_a_data_folder_and_unclaimed_files_are_refused(tmp_path: Path) -> None:
    model = tmp_path / "tiny-llama"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data = tmp_path / "data" / "train.jsonl"
    data.parent.mkdir()
    data.write_text("{}\n")
    sources = [("model.weights", model), ("dataset.local_path", data)]
    assert "itself" in _refused(check_output, tmp_path, "j", [tmp_path], sources).description
    assert "model.weights" in _refused(check_output, model, "j", [tmp_path], sources).description
    assert "model.weights" in _refused(check_output, model / "out", "j", [tmp_path], sources).description
    assert "dataset.local_path" in _refused(check_output, tmp_path / "data", "j", [tmp_path], sources).description
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("mine")
    assert "no tunefleet run claimed" in _refused(check_output, tmp_path / "notes", "j").description
    assert "existing file" in _refused(check_output, tmp_path / "notes" / "a.txt", "j").description
    assert check_output(tmp_path / "runs" / "new", "j", [tmp_path], sources) == tmp_path / "runs" / "new"
    assert not (tmp_path / "runs").exists()  # checking writes nothing


def _plan(**changes: str) -> plan_pb2.Plan:
    plan = make_plan(Path("/srv/models/tiny"), Path("/srv/data/train.jsonl"), Path("runs/x"), plan_id="x")
    for name, value in changes.items():
        target, _, leaf = name.rpartition("__")
        setattr(getattr(plan, target) if target else plan, leaf, value)
    return plan


@pytest.mark.parametrize(("changes", "field"), [
    ({"plan_id": "llama3.1-lora"}, "plan_id"),
    ({"plan_id": "data.jsonl"}, "plan_id"),
    ({"output_uri": "."}, "output_uri"),
    ({"output_uri": "runs/a\x00b"}, "output_uri"),
    ({"output_uri": "runs/a\nb"}, "output_uri"),
    ({"dataset__local_path": "/srv/data/a\x00.jsonl"}, "dataset.local_path"),
    ({"model__weights": "/srv/models/\x00"}, "model.weights"),
])
def test_ids_and_paths_the_fleet_cannot_use_are_refused_by_field(changes: dict[str, str], field: str) -> None:
    with pytest.raises(PlanError) as info:
        run_config_from_plan(_plan(**changes))
    assert info.value.field == field


def test_the_plan_id_rule_suggests_an_id_that_passes() -> None:
    with pytest.raises(PlanError) as info:
        run_config_from_plan(_plan(plan_id="llama3.1-lora"))
    assert "'llama3-1-lora'" in info.value.description
    assert run_config_from_plan(_plan(plan_id="llama3-1-lora")).plan_id == "llama3-1-lora"

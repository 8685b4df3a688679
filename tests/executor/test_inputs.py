"""Issue 57, items 1 and 6: a plan's output, its dataset and its model folder on object storage
(executor.training.inputs, contract.paths), against a real S3 API server on loopback (moto's server mode). Inputs
are read through the host's cache keyed by every file's ETag and size, so a second run downloads nothing; only under
the host's object-store data roots (a team's part of them under --team-roots); a real training run reads both from
the store. An output prefix gets the run's checkpoints and export; only under the host's object-store output roots."""

from __future__ import annotations

import argparse
from pathlib import Path

import boto3
import pytest
from tunefleet.v1 import executor_pb2

from contract.errors import PlanError
from contract.paths import Roots
from contract.run_config import run_config_from_plan
from contract.store import Store
from devtools.tiny import make_plan, write_plan
from executor.service.outputs import check_shared_output
from executor.training import inputs
from executor.training.launcher import train


def _put(uri: str, body: bytes) -> None:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=body)


def _put_tree(local: Path, uri: str) -> None:
    for p in sorted(local.rglob("*")):
        if p.is_file():
            _put(f"{uri}/{p.relative_to(local)}", p.read_bytes())


def test_a_file_is_downloaded_once_per_version_and_a_folder_whole(s3_store, tmp_path):
    cache = tmp_path / "cache"
    _put(f"{s3_store}/data/a.jsonl", b'{"text": "one"}\n')
    first, fetched = inputs.cached(f"{s3_store}/data/a.jsonl", cache, "dataset.local_path")
    assert fetched == 16 and first.read_bytes() == b'{"text": "one"}\n'
    again, fetched = inputs.cached(f"{s3_store}/data/a.jsonl", cache, "dataset.local_path")
    assert (again, fetched) == (first, 0), "an unchanged object comes from the cache"
    _put(f"{s3_store}/data/a.jsonl", b'{"text": "two"}\n')  # same size, another ETag
    changed, fetched = inputs.cached(f"{s3_store}/data/a.jsonl", cache, "dataset.local_path")
    assert changed != first and fetched == 16 and changed.read_bytes() == b'{"text": "two"}\n'
    _put(f"{s3_store}/model/config.json", b"{}")
    _put(f"{s3_store}/model/sub/weights.bin", b"w" * 100)
    folder, fetched = inputs.cached(f"{s3_store}/model", cache, "model.weights")
    assert fetched == 102 and (folder / "config.json").read_bytes() == b"{}"
    assert (folder / "sub" / "weights.bin").stat().st_size == 100
    with pytest.raises(PlanError) as e:
        inputs.cached(f"{s3_store}/data/missing.jsonl", cache, "dataset.local_path")
    assert e.value.field == "dataset.local_path" and "is not in the store" in e.value.description


def test_object_store_data_roots_admit_only_their_prefix_and_a_team_only_its_part(s3_store, tmp_path):
    parsed = argparse.ArgumentParser()
    Roots.add_arguments(parsed)
    roots = Roots.from_arguments(parsed.parse_args(["--data-root", f"{s3_store}/data/", "--data-root", str(tmp_path)]))
    assert roots.stores == (f"{s3_store}/data",) and roots.data == (tmp_path.resolve(),)
    assert f"--data-root={s3_store}/data" in roots.arguments(), "a worker hands its runs the same roots"
    assert roots.readable_uri("dataset.local_path", f"{s3_store}/data/x.jsonl") == f"{s3_store}/data/x.jsonl"
    for outside in (f"{s3_store}/database.jsonl", f"{s3_store}/data/../secret.jsonl", f"{s3_store}/other/x"):
        with pytest.raises(PlanError) as e:
            roots.readable_uri("dataset.local_path", outside)
        assert e.value.field == "dataset.local_path"
    vision, nlp = roots.of_team("vision"), roots.of_team("nlp")
    assert vision.readable_uri("model.weights", f"{s3_store}/data/teams/vision/m") == f"{s3_store}/data/teams/vision/m"
    with pytest.raises(PlanError, match="outside this host's object-store data roots"):
        nlp.readable_uri("model.weights", f"{s3_store}/data/teams/vision/m")  # another team's prefix


@pytest.mark.training
def test_a_run_reads_its_dataset_and_model_from_the_store_and_a_second_run_downloads_nothing(
        s3_store, tiny_model, counting_data, tmp_path, monkeypatch, capfd):
    monkeypatch.setenv(inputs.CACHE_ENV, str(tmp_path / "cache"))
    _put(f"{s3_store}/data/counting.jsonl", counting_data.read_bytes())
    _put_tree(tiny_model, f"{s3_store}/data/tiny")
    roots = Roots((tmp_path.resolve(),), (tmp_path.resolve(),), (f"{s3_store}/data",))
    for run in ("first", "second"):
        plan = make_plan(tiny_model, counting_data, tmp_path / run, max_steps=2)
        plan.dataset.local_path, plan.model.weights = f"{s3_store}/data/counting.jsonl", f"{s3_store}/data/tiny"
        result = train(write_plan(plan, tmp_path / f"{run}.json"), progress_interval_s=0, roots=roots)
        assert result.succeeded, result.last_event.message
    said = capfd.readouterr().err
    assert said.count("downloaded") == 2 and said.count("read from this host's cache") == 2, said
    refused = make_plan(tiny_model, counting_data, tmp_path / "refused", max_steps=2)
    refused.dataset.local_path = f"{s3_store}/elsewhere/counting.jsonl"
    with pytest.raises(PlanError) as e:
        train(write_plan(refused, tmp_path / "refused.json"), progress_interval_s=0, roots=roots)
    assert e.value.field == "dataset.local_path"


@pytest.mark.training
def test_a_plan_whose_output_is_an_object_store_prefix_stores_its_checkpoints_and_export_there(
        s3_store, tiny_model, counting_data, tmp_path):
    roots = Roots((tmp_path.resolve(), tiny_model.resolve()), (tmp_path.resolve(),), (), (f"{s3_store}/outputs",))
    plan = make_plan(tiny_model, counting_data, tmp_path / "unused", plan_id="stored", max_steps=4, checkpoint_every=2)
    plan.output_uri = f"{s3_store}/outputs/stored"
    local = tmp_path / "local"
    result = train(write_plan(plan, tmp_path / "stored.json"), output_dir=str(local), progress_interval_s=0,
                   roots=roots)
    assert result.succeeded, result.last_event.message
    store = Store(plan.output_uri)
    assert [s.step for s in store.sealed()] == [2, 4] and store.fs.exists(f"{store.root}/final/adapter_config.json")
    assert (local / "summary.json").is_file(), "events, logs and the summary stay on the host"
    plan.output_uri = f"{s3_store}/elsewhere/stored"
    with pytest.raises(PlanError) as e:
        train(write_plan(plan, tmp_path / "elsewhere.json"), output_dir=str(local), roots=roots)
    assert e.value.field == "output_uri" and "outside this host's object-store output roots" in e.value.description
    plan.output_uri, plan.hardware.nodes = f"{s3_store}/outputs/stored", 2
    with pytest.raises(PlanError, match="storage every node mounts"):  # a gang's nodes write one checkpoint
        run_config_from_plan(plan)
    assert check_shared_output(f"{s3_store}/outputs/x", [executor_pb2.Host(host_id=h) for h in "ab"]) is None

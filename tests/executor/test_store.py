"""Checkpoints on object storage (contract.store, executor.training.remote) against a real S3 API server on loopback
(moto's server mode): sealed only by a manifest written last, never by a stale holder, fetched and verified file by
file, pruned only after a newer seal, uploads retried through an outage and failed after the store's deadline."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import boto3
import pytest

from common import exit_status
from contract.errors import LeaseLostError, PlanError, TrainingFailedError
from contract.paths import Roots
from contract.store import MANIFEST, Store, job_prefix, worker_store
from executor.training import checkpoint, remote
from executor.worker.placement import Place
from fleet.record import JobRecord

KEY = b"test-checkpoint-key"


def _local_checkpoint(root: Path, step: int, fence: int = 1, payload: bytes = b"weights") -> Path:
    """A sealed local checkpoint as executor.training.checkpoint writes one (one rank)."""
    d = checkpoint.step_dir(root, step)
    (d / checkpoint.DEEPSPEED_TAG).mkdir(parents=True)
    (d / checkpoint.DEEPSPEED_TAG / "mp_rank_00_model_states.pt").write_bytes(payload * 1000 + bytes([step]))
    (d / checkpoint.rng_file(0)).write_bytes(b"rng")
    (d / checkpoint.TRAINER_STATE).write_text(json.dumps({"plan_id": "p", "step": step, "next_micro_batch": step,
                                                          "world_size": 1, "fence": fence}))
    checkpoint.write_manifest(d, KEY)
    return d


def _objects(uri: str) -> list[str]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    found = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"].removeprefix(prefix + "/") for o in found)


def test_a_checkpoint_is_sealed_by_its_manifest_written_last_and_fetched_whole(s3_store, tmp_path):
    store = Store(job_prefix(s3_store, "job-1"))
    local = _local_checkpoint(tmp_path / "a", 4, fence=2)
    seen_before_seal: list[str] = []

    def may_seal() -> bool:
        seen_before_seal.extend(_objects(store.uri))
        return True

    sealed = store.upload(local, 4, 2, may_seal)
    assert sealed is not None and (sealed.step, sealed.fence) == (4, 2)
    assert seen_before_seal and not any(name.endswith(MANIFEST) for name in seen_before_seal), \
        "every file is stored before the manifest"
    assert f"checkpoints/step-00000004/f2/{MANIFEST}" in _objects(store.uri)
    assert store.sealed() == [sealed]

    notices: list[str] = []
    fetched = remote.newest_into(store, tmp_path / "b", KEY, 0, notices.append)
    assert fetched == checkpoint.step_dir(tmp_path / "b", 4) and checkpoint.verify(fetched, KEY) == ""
    assert {p.relative_to(fetched) for p in fetched.rglob("*")} == {p.relative_to(local) for p in local.rglob("*")}
    assert "downloaded checkpoint step 4" in notices[-1]
    assert remote.newest_into(store, tmp_path / "c", KEY, 4, notices.append) is None, "nothing newer than the local"


def test_a_holder_that_may_not_seal_leaves_no_seal_and_a_seal_is_never_replaced(s3_store, tmp_path):
    store = Store(job_prefix(s3_store, "job-2"))
    local = _local_checkpoint(tmp_path / "a", 3)
    assert store.upload(local, 3, 1, lambda: False) is None
    assert store.sealed() == [], "uploaded files without their manifest are no checkpoint"

    def lost() -> bool:
        raise LeaseLostError("job-2 is held by another run")

    with pytest.raises(LeaseLostError):
        store.upload(local, 3, 1, lost)
    assert store.sealed() == []

    assert store.upload(local, 3, 1, lambda: True) is not None
    other = _local_checkpoint(tmp_path / "b", 3, payload=b"other")
    with pytest.raises(TrainingFailedError, match="sealed with another manifest"):
        store.upload(other, 3, 1, lambda: True)  # the same claim's seal, different content: refused, not replaced
    assert remote.newest_into(store, tmp_path / "c", KEY, 0, lambda m: None) is not None
    assert checkpoint.step_dir(tmp_path / "c", 3).joinpath(checkpoint.DEEPSPEED_TAG, "mp_rank_00_model_states.pt") \
        .read_bytes().startswith(b"weights")


def test_a_missing_or_corrupted_object_falls_back_to_the_checkpoint_before_it_naming_the_object(s3_store, tmp_path):
    store = Store(job_prefix(s3_store, "job-3"))
    for step in (2, 4, 6):
        store.upload(_local_checkpoint(tmp_path / "src", step), step, 1, lambda: True)
    bucket, _, prefix = store.uri.removeprefix("s3://").partition("/")
    s3 = boto3.client("s3")
    model = f"{checkpoint.DEEPSPEED_TAG}/mp_rank_00_model_states.pt"
    s3.delete_object(Bucket=bucket, Key=f"{prefix}/checkpoints/step-00000006/f1/{model}")
    s3.put_object(Bucket=bucket, Key=f"{prefix}/checkpoints/step-00000004/f1/{model}", Body=b"flipped bits")

    notices: list[str] = []
    fetched = remote.newest_into(store, tmp_path / "dst", KEY, 0, notices.append)
    assert fetched == checkpoint.step_dir(tmp_path / "dst", 2)
    assert f"step-00000006/f1/{model} is missing" in notices[0]
    assert f"step-00000004/f1/{model} does not match its manifest" in notices[1]
    assert not list((tmp_path / "dst").glob(f"{checkpoint.PARTIAL_PREFIX}*")), "failed downloads are cleaned up"


def test_pruning_keeps_the_newest_sealed_ones_and_drops_unsealed_attempts_only_behind_a_seal(s3_store, tmp_path):
    store = Store(job_prefix(s3_store, "job-4"))
    for step in (1, 2, 3):
        store.upload(_local_checkpoint(tmp_path / "src", step), step, 1, lambda: True)
    store.upload(_local_checkpoint(tmp_path / "stale", 3), 3, 0, lambda: False)  # a stale claim's, unsealed
    store.upload(_local_checkpoint(tmp_path / "next", 5), 5, 1, lambda: False)  # a newer one not sealed (yet)
    store.prune(keep=2)
    assert [(s.step, s.fence) for s in store.sealed()] == [(2, 1), (3, 1)]
    names = _objects(store.uri)
    assert not any(n.startswith("checkpoints/step-00000003/f0/") for n in names), "an unsealed attempt behind a seal"
    assert any(n.startswith("checkpoints/step-00000005/f1/") for n in names), "never what a later seal may need"


def test_a_wrong_bucket_or_credentials_in_the_uri_are_refused_naming_it(s3_store):
    with pytest.raises(PlanError, match="s3://no-such-bucket-x/fleet cannot be written.*bucket"):
        worker_store("s3://no-such-bucket-x/fleet")
    with pytest.raises(PlanError, match="put no credentials in the URI") as refused:
        worker_store("s3://AKIA:secret@bucket/fleet")
    assert "secret" not in str(refused.value)
    worker_store(s3_store)  # the real bucket passes


def test_uploads_go_on_through_an_outage_and_fail_the_run_only_after_the_deadline(stoppable_s3, tmp_path):
    server = stoppable_s3.server
    store = Store(job_prefix(stoppable_s3.uri, "j"))
    slept: list[float] = []
    restarted = threading.Event()

    def sleep(seconds: float) -> None:  # the backoff: the server comes back during the first wait
        slept.append(seconds)
        if not restarted.is_set():
            server.start()
            restarted.set()

    uploader = remote.Uploader(store, lambda: True, keep=2, deadline_s=60.0, sleep=sleep)
    server.stop()
    uploader.submit(_local_checkpoint(tmp_path / "a", 1), 1, 1)
    uploader.close(timeout_s=60)
    raw = uploader.notices()
    notices = [n.message for n in raw]
    assert any("storing checkpoint step 1 failed" in n and "retrying in 1 s" in n for n in notices), notices
    assert [(n.stored_step, n.stored_uri) for n in raw if n.stored_uri] == \
        [(1, "s3://outage/fleet/jobs/j/checkpoints/step-00000001/f1")], "the seal's event names what it sealed"
    assert any("checkpoint step 1 stored and sealed" in n for n in notices), notices
    assert [s.step for s in store.sealed()] == [1] and slept

    failing = remote.Uploader(store, lambda: True, keep=2, deadline_s=0.5, sleep=lambda s: None)
    server.stop()
    failing.submit(_local_checkpoint(tmp_path / "b", 2), 2, 1)
    with pytest.raises(TrainingFailedError, match="could not be stored in s3://outage/fleet/jobs/j"):
        failing.close(timeout_s=60)
    server.start()
    assert [s.step for s in store.sealed()] == [1], "a failed upload deletes nothing"


def test_a_prune_that_fails_after_a_seal_leaves_the_run_going(s3_store, tmp_path):
    class Unprunable(Store):
        def prune(self, keep: int) -> None:
            raise OSError("connection reset while listing")

    uploader = remote.Uploader(Unprunable(job_prefix(s3_store, "j")), lambda: True, keep=1)
    uploader.submit(_local_checkpoint(tmp_path, 1), 1, 1)
    uploader.close(timeout_s=60)  # raises the upload thread's failure, if any
    notices = [n.message for n in uploader.notices()]
    assert any("checkpoint step 1 stored and sealed" in n for n in notices), notices
    assert any("deleting checkpoints older than step 1" in n and "failed (OSError" in n for n in notices), notices


def test_each_team_s_jobs_keep_checkpoints_under_its_own_prefix_which_the_worker_names(s3_store, tmp_path):
    roots = Roots((tmp_path,), (tmp_path,))
    vision, nlp = (Place.of(roots, tmp_path, True, JobRecord(job, team=team), s3_store)
                   for job, team in (("v1", "vision"), ("n1", "nlp")))
    assert (vision.store, nlp.store) == (f"{s3_store}/teams/vision/jobs/v1", f"{s3_store}/teams/nlp/jobs/n1")
    assert Place.of(roots, tmp_path, False, JobRecord("v1", team="vision"), s3_store).store == f"{s3_store}/jobs/v1"
    assert Place.of(roots, tmp_path, True, JobRecord("v1", team="vision")).store == "", "no store, no prefix"
    Store(vision.store).upload(_local_checkpoint(tmp_path / "v", 3), 3, 1, lambda: True)
    assert [s.step for s in Store(vision.store).sealed()] == [3] and Store(nlp.store).sealed() == []
    with pytest.raises(PlanError, match="cannot name a folder"):  # a team that could climb out of its prefix
        Place.of(roots, tmp_path, True, JobRecord("x", team="../nlp"), s3_store)


def test_a_worker_whose_store_cannot_be_used_exits_2_naming_it_before_it_takes_a_job(s3_store, tmp_path):
    for uri, why in ((s3_store.replace("s3://", "s3://missing-"), "cannot be written"),
                     ("s3://key:secret@bucket/fleet", "put no credentials in the URI")):
        done = subprocess.run([sys.executable, "-m", "launch", "worker", "--redis", "redis://127.0.0.1:1/0",
                               "--work-dir", str(tmp_path), "--checkpoint-store", uri],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == exit_status.BAD_INPUT == 2, done.stderr
        assert "--checkpoint-store" in done.stderr and why in done.stderr and "secret" not in done.stderr, done.stderr


def test_a_run_starting_during_an_outage_waits_for_the_store_and_a_missing_bucket_fails_at_once(
        stoppable_s3, tmp_path):
    server, notices, slept = stoppable_s3.server, [], []

    def sleep(seconds: float) -> None:  # the backoff: the store comes back during the first wait
        slept.append(seconds)
        server.start()

    server.stop()
    remote.wait_for_store(Store(job_prefix(stoppable_s3.uri, "j")), 60.0, notices.append, sleep)
    assert slept == [1.0] and "cannot be reached (EndpointConnectionError); trying again in 1 s" in notices[0], notices
    server.stop()
    with pytest.raises(PlanError, match="cannot be written"):  # down past the deadline
        remote.wait_for_store(Store(job_prefix(stoppable_s3.uri, "j")), 0.5, notices.append, lambda s: None)
    server.start()
    with pytest.raises(PlanError, match="missing-outage/fleet cannot be written") as e:
        remote.wait_for_store(Store("s3://missing-outage/fleet"), 60.0, notices.append, slept.append)
    assert isinstance(e.value.__cause__, FileNotFoundError) and slept == [1.0], "a missing bucket is not waited for"

"""Issue 57: a fleet whose hosts share no directory keeps its checkpoints in object storage — real `tunefleet worker`
processes, each with its own --work-dir and no --work-dir-shared, a real S3 API server on loopback (moto's server
mode), real DeepSpeed training of the tiny Llama on the CPU. A host killed mid-run costs only the work since its
last sealed checkpoint: another worker downloads it and ends bit for bit where an uninterrupted run ends; a paused
holder whose job moved seals nothing; the store's credentials appear nowhere a user or an admin reads."""

from __future__ import annotations

import http.cookiejar
import re
import signal
import time
import urllib.parse
import urllib.request

import psutil
import pytest
import redis
import torch
from tunefleet.v1 import progress_pb2

from clients.executor_client import ExecutorClient
from contract.progress import read_events
from contract.store import FINAL, Store, job_prefix
from devtools.tiny import make_plan, write_plan
from executor.training.launcher import train
from fleet.recovery import FleetPolicy
from tests.conftest import S3_SECRET
from tests.integration.conftest import serve_process
from tests.integration.fleet_helpers import (
    WAIT_S,
    all_events,
    assert_once_in_order,
    checkpoint_states,
    fleet_plan,
    holder_of,
    process_tree,
    send_signal,
    wait_for,
    watch_until,
)
from tests.integration.training_helpers import exported

pytestmark = [pytest.mark.integration, pytest.mark.training, pytest.mark.timeout(600)]
TOTAL, EVERY = 40, 10  # steps, and a checkpoint every EVERY of them
LEASE = ("--lease-ttl-s", "10")  # a lost host's lease lapses sooner than the default 30 s
DETECTION_BOUND_S = 60.0  # a lost host's job is requeued within a minute (README, "Fleet guarantees")


def _workers(start_worker, store: str, *extra: str) -> dict[str, object]:
    """Two workers sharing no directory: a --work-dir each, checkpoints in the store."""
    return {w.host_id: w for w in (start_worker(h, extra=(*LEASE, "--checkpoint-store", store, *extra))
                                   for h in ("host-a", "host-b"))}


def _sealed_event(e: progress_pb2.ProgressEvent) -> bool:
    return "stored and sealed in" in e.message


def _redis_text(url: str) -> str:
    """Every value of every key in the test's Redis, as text."""
    r = redis.Redis.from_url(url)
    read = {b"string": r.get, b"hash": r.hgetall, b"list": lambda k: r.lrange(k, 0, -1), b"set": r.smembers,
            b"zset": lambda k: r.zrange(k, 0, -1, withscores=True), b"stream": r.xrange}
    return repr([(key, read[r.type(key)](key)) for key in r.scan_iter() if r.type(key) in read])


def _dashboard_pages(executor: str, job_id: str) -> str:
    """The dashboard's pages about the job and the fleet, as a person logged in sees them."""
    proc, address = serve_process("dashboard", "--executor", executor)
    try:
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        base = f"http://{address}"
        opener.open(urllib.request.Request(f"{base}/login", data=urllib.parse.urlencode({"token": ""}).encode()),
                    timeout=WAIT_S)
        pages = {path: opener.open(f"{base}{path}", timeout=WAIT_S).read().decode()
                 for path in ("/jobs", f"/jobs/{job_id}", f"/jobs/{job_id}/facts", "/fleet")}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    missing = [path for path in ("/jobs", f"/jobs/{job_id}") if job_id not in pages[path]]
    assert not missing, f"the dashboard's pages {missing} do not show the job: {[pages[p][:2000] for p in missing]}"
    return "\n".join(pages.values())


def test_a_killed_host_s_job_resumes_from_the_store_on_a_host_sharing_no_directory_bit_for_bit(
        start_service, start_worker, tiny_model, counting_data, s3_store, redis_url, tmp_path):
    service = start_service(policy=FleetPolicy(retry_backoff_s=1.0), sweep_interval_s=1.0)
    workers = _workers(start_worker, s3_store, "--store-keep", "1")
    store = Store(job_prefix(s3_store, "lost"))
    with ExecutorClient(service.address, timeout_s=60) as client:
        wait_for(lambda: len(client.fleet().hosts) == 2, "both workers to register")
        client.submit(fleet_plan(tiny_model, counting_data, "lost", max_steps=TOTAL, checkpoint_every=EVERY))
        before = watch_until(client, "lost", _sealed_event)
        lost = holder_of(client, "lost")
        tree = process_tree(workers[lost].proc.pid)
        send_signal(tree, signal.SIGKILL)  # power loss: worker, launcher and ranks at once
        killed_at = time.time()
        psutil.wait_procs(tree, timeout=WAIT_S)
        sealed_at_kill = store.sealed()[-1].step
        rest = watch_until(client, "lost", lambda e: False, after=before[-1].sequence)
        events = all_events(client, "lost")
        job = client.get("lost")
        fleet_answer = client.fleet()
        pages = _dashboard_pages(service.address, "lost")
    survivor = ({"host-a", "host-b"} - {lost}).pop()
    assert job.phase == progress_pb2.PHASE_DONE and job.host_id == survivor, job.error
    assert job.infra_failures == 1
    assert_once_in_order(events)
    requeued = next(e for e in rest if e.phase == progress_pb2.PHASE_QUEUED)
    assert f"host {lost} stopped renewing its lease" in requeued.message and "retry 1 of 3" in requeued.message
    detection_s = requeued.time.ToNanoseconds() / 1e9 - killed_at
    assert detection_s < DETECTION_BOUND_S, f"the lost host was noticed after {detection_s:.0f} s"
    stored = before[-1].stored_checkpoint
    assert stored.step == EVERY and stored.uri == f"{store.uri}/checkpoints/step-{EVERY:08d}/f1", stored
    uploading = [e for e in before if e.message.startswith("uploading checkpoint step")]
    assert uploading and " MiB) to s3://" in uploading[0].message
    downloaded = [e for e in rest if e.message.startswith(f"downloaded checkpoint step {sealed_at_kill} from ")]
    assert downloaded, "the survivor must fetch the newest sealed checkpoint from the store"
    resumed = [e for e in rest if e.phase == progress_pb2.PHASE_LOADING and "resumed from" in e.message]
    assert resumed and resumed[0].step == sealed_at_kill, "it resumes from the newest sealed checkpoint"

    out = workers[survivor].work_dir / "lost"
    assert not (workers[lost].work_dir / "lost" / "final").exists()
    final = checkpoint_states(out)[-1]
    assert (final.step, final.next_micro_batch) == (TOTAL, TOTAL)
    assert [s.step for s in store.sealed()] == [TOTAL], "--store-keep 1: the newest sealed checkpoint only"
    assert store.fs.exists(f"{store.root}/{FINAL}/adapter_config.json")

    straight = tmp_path / "straight"
    plan = make_plan(tiny_model, counting_data, straight, plan_id="lost", max_steps=TOTAL, checkpoint_every=EVERY)
    assert train(write_plan(plan, tmp_path / "straight.json"), progress_interval_s=0).succeeded
    ours, theirs = exported(out), exported(straight)
    assert ours.keys() == theirs.keys()
    for name, tensor in ours.items():
        assert torch.equal(tensor, theirs[name]), f"{name} differs from the uninterrupted run's"

    # The credentials' secret is nowhere a user or an admin reads: events, answers, Redis, logs, pages.
    logs = [w.log for w in workers.values()] + [out / "logs" / "train.log"]
    seen = {"events": repr(events), "Get": str(job), "Fleet": str(fleet_answer), "Redis": _redis_text(redis_url),
            "dashboard": pages, **{str(p): p.read_text(errors="replace") for p in logs}}
    assert s3_store.removeprefix("s3://").split("/")[0] in seen["events"]
    assert not [where for where, text in seen.items() if S3_SECRET in text]


def test_a_stale_holder_whose_upload_outlived_its_lease_stores_its_files_but_cannot_seal_them(
        start_service, start_worker, tiny_model, counting_data, stoppable_s3):
    """The store goes down mid-upload; the holder is frozen and its job moves; the store comes back and the stale
    run wakes before its worker can stop it: its upload retries, stores its files, and the fence check refuses the
    seal (its worker does not answer, so the run cannot confirm it still holds the job)."""
    service = start_service(sweep_interval_s=0.5, policy=FleetPolicy(retry_backoff_s=0.0))
    workers = _workers(start_worker, stoppable_s3.uri)
    store = Store(job_prefix(stoppable_s3.uri, "paused"))
    with ExecutorClient(service.address, timeout_s=60) as client:
        wait_for(lambda: len(client.fleet().hosts) == 2, "both workers to register")
        client.submit(fleet_plan(tiny_model, counting_data, "paused", max_steps=TOTAL, checkpoint_every=EVERY))
        before = watch_until(client, "paused", _sealed_event)
        stale = holder_of(client, "paused")
        fresh = ({"host-a", "host-b"} - {stale}).pop()
        stoppable_s3.server.stop()  # the store is unreachable: the next checkpoint's upload fails and is retried
        failing = watch_until(client, "paused", lambda e: bool(re.match(r"storing checkpoint step \d+ failed",
                                                                         e.message)), after=before[-1].sequence)
        stuck = int(re.findall(r"\d+", failing[-1].message)[0])
        frozen = process_tree(workers[stale].proc.pid)  # the worker first, then its run's processes
        send_signal(frozen, signal.SIGSTOP)
        stoppable_s3.server.start()
        taken = watch_until(client, "paused", lambda e: e.phase == progress_pb2.PHASE_LOADING
                            and e.message.startswith(f"host {fresh} ("), after=failing[-1].sequence)
        assert taken[-1].phase == progress_pb2.PHASE_LOADING, taken[-1].message
        send_signal(frozen[1:], signal.SIGCONT)  # the stale run wakes; its worker still sleeps
        stale_events = workers[stale].work_dir / "paused" / "progress.jsonl"
        ended = wait_for(lambda: [e.message for e in read_events(stale_events)
                                  if e.message.startswith(f"checkpoint step {stuck} ")], "the stale upload to end")
        send_signal(frozen[:1], signal.SIGCONT)  # its worker wakes, finds its lease lost and stops the run
        watch_until(client, "paused", lambda e: False, after=taken[-1].sequence)
        _, alive = psutil.wait_procs(frozen[1:], timeout=120)
        assert not alive, f"the stale run's processes outlived it: {[(p.pid, p.status()) for p in alive]}"
        job = client.get("paused")
    assert job.phase == progress_pb2.PHASE_DONE and job.host_id == fresh, job.error
    assert "uploaded but not sealed" in ended[0], ended  # type: ignore[index]
    sealed = store.sealed()
    fresh_fence = max(s.fence for s in sealed)
    assert [s for s in sealed if s.fence != fresh_fence and s.step > taken[-1].step] == [], \
        "the stale run sealed a checkpoint in the store after the job moved"
    assert sealed[-1].step == TOTAL and sealed[-1].fence == fresh_fence

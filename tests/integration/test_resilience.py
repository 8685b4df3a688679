"""Fleet resilience end to end: hosts paused and drained, Redis restarted, low-priority work preempted — with real
redis-server, real `tunefleet worker` processes and real DeepSpeed training of a tiny Llama on the CPU. Nothing is
lost (every event once, in order), nothing runs twice (a stale host writes nothing), and every interrupted job ends
where an uninterrupted run would. A host killed outright: test_object_store (its checkpoints reach the next host
through the object store; through a shared mount, test_fleet's drained worker and test_multinode's lost node)."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from tunefleet.v1 import executor_pb2, progress_pb2

from clients.executor_client import ExecutorClient
from contract.progress import read_events
from devtools.local_redis import start_redis_server, stop_redis_server
from fleet.recovery import FleetPolicy
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

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def test_a_paused_host_that_lost_its_lease_writes_nothing_when_it_wakes(
        start_service, start_worker, tiny_model, counting_data, tmp_path):
    service = start_service(sweep_interval_s=0.5, policy=FleetPolicy(retry_backoff_s=0.0))
    shared = tmp_path / "shared"
    lease = ("--lease-ttl-s", "10")
    workers = {w.host_id: w for w in (start_worker("host-a", shared_dir=shared, extra=lease),
                                      start_worker("host-b", shared_dir=shared, extra=lease))}
    total = 60  # a killed or paused host's ranks make no step until the run resumes
    out = shared / "paused"
    with ExecutorClient(service.address, timeout_s=60) as client:
        wait_for(lambda: len(client.fleet().hosts) == 2, "both workers to register")
        submitted = fleet_plan(tiny_model, counting_data, "paused", max_steps=total, checkpoint_every=10)
        client.submit(submitted)
        before = watch_until(client, "paused", lambda e: e.phase == progress_pb2.PHASE_CHECKPOINTING)
        stale = holder_of(client, "paused")
        fresh = ({"host-a", "host-b"} - {stale}).pop()
        paused = process_tree(workers[stale].proc.pid)
        send_signal(paused, signal.SIGSTOP)  # the whole host freezes (or is cut off) past its lease
        taken = watch_until(client, "paused", lambda e: e.phase == progress_pb2.PHASE_LOADING
                             and e.message.startswith(f"host {fresh} ("), after=before[-1].sequence)
        assert taken[-1].phase == progress_pb2.PHASE_LOADING, taken[-1].message
        send_signal(paused, signal.SIGCONT)  # it wakes up still believing it runs the job
        watch_until(client, "paused", lambda e: False, after=taken[-1].sequence)
        _, alive = psutil.wait_procs(paused[1:], timeout=120)
        assert not alive, f"the stale run's processes outlived it: {[(p.pid, p.status()) for p in alive]}"
        wait_for(lambda: any(h.host_id == stale and not h.running_job_id for h in client.fleet().hosts),
                  "the stale worker to go idle")
        events = all_events(client, "paused")
        job = client.get("paused")
    assert job.phase == progress_pb2.PHASE_DONE and job.host_id == fresh and events[-1].step == total
    # none of the stale holder's record writes landed (fleet.jobs.JobStore's holder writes): its error, its
    # output dir and log, its plan
    assert job.error == "" and job.output_uri == str(out) and job.log_path == str(out / "logs" / "train.log")
    assert job.plan.plan_id == submitted.plan_id and job.plan.hyperparameters == submitted.hyperparameters
    assert_once_in_order(events)
    assert len([e for e in events if e.phase == progress_pb2.PHASE_DONE]) == 1
    in_file = [e.sequence for e in read_events(out / "progress.jsonl")]
    assert len(in_file) == len(set(in_file)), "the stale run wrote events into the job's progress file"
    handed_over_at = taken[-1].step
    states = checkpoint_states(out)
    fresh_fence = max(s.fence for s in states)
    assert all(s.fence == fresh_fence or s.step <= handed_over_at for s in states), \
        "the stale run sealed a checkpoint after the job moved"
    assert "job.lease_lost" in workers[stale].log.read_text()


@dataclass
class AofRedis:
    """A redis-server of the test's own with its append-only file on, restartable on the same port and data."""

    data_dir: Path
    proc: subprocess.Popen[bytes]
    url: str

    def stop(self) -> None:
        stop_redis_server(self.proc)  # SIGTERM: Redis flushes its append-only file and exits

    def start(self) -> None:
        port = int(self.url.split(":")[2].split("/")[0])
        self.proc, _ = start_redis_server(self.data_dir, appendonly=True, port=port)


@pytest.fixture()
def aof_redis(tmp_path: Path) -> Iterator[AofRedis]:
    """Asked for before the service and worker fixtures, so it outlives them (they stop while it still runs)."""
    data_dir = tmp_path / "redis-aof"
    data_dir.mkdir()
    proc, url = start_redis_server(data_dir, appendonly=True)
    server = AofRedis(data_dir, proc, url)
    yield server
    stop_redis_server(server.proc)


def test_a_redis_restart_loses_no_job_and_no_event(aof_redis, start_service, start_worker, tiny_model,
                                                  counting_data):
    service = start_service(url=aof_redis.url)
    start_worker("host-a", url=aof_redis.url)
    with ExecutorClient(service.address, timeout_s=60) as client:
        client.submit(fleet_plan(tiny_model, counting_data, "running", max_steps=120, checkpoint_every=20))
        client.submit(fleet_plan(tiny_model, counting_data, "queued", max_steps=8))
        watched: list[progress_pb2.ProgressEvent] = []
        watching = threading.Thread(target=lambda: watched.extend(all_events(client, "running")))
        watching.start()
        seen = watch_until(client, "running", lambda e: e.phase == progress_pb2.PHASE_TRAINING and e.step >= 5)
        assert client.get("queued").phase == progress_pb2.PHASE_QUEUED
        progress = Path(client.get("running").output_uri) / "progress.jsonl"

        aof_redis.stop()
        # down long enough for the run to write events Redis did not take (they wait in its file, then the
        # worker publishes them)
        wait_for(lambda: read_events(progress)[-1].sequence >= seen[-1].sequence + 20, "training without Redis")
        aof_redis.start()

        runs = {job_id: all_events(client, job_id) for job_id in ("running", "queued")}
        watching.join(timeout=WAIT_S)
        jobs = {job_id: client.get(job_id) for job_id in runs}
    for job_id, events in runs.items():
        assert jobs[job_id].phase == progress_pb2.PHASE_DONE, jobs[job_id].error
        assert_once_in_order(events)
        in_file = read_events(Path(jobs[job_id].output_uri) / "progress.jsonl")
        assert [e.sequence for e in events] == [e.sequence for e in in_file], \
            "the stream and the run's own record disagree"
    assert runs["running"][-1].step == 120 and runs["queued"][-1].step == 8
    assert [e.sequence for e in watched] == [e.sequence for e in runs["running"]], \
        "a Watch open across the restart missed or repeated events"


def test_a_high_priority_job_preempts_a_low_one_which_resumes_from_its_yield_checkpoint(
        start_service, start_worker, tiny_model, counting_data):
    service = start_service(policy=FleetPolicy(preemption=True), sweep_interval_s=0.5)
    start_worker("host-a")
    total = 60
    with ExecutorClient(service.address, timeout_s=60) as client:
        client.submit(fleet_plan(tiny_model, counting_data, "low", max_steps=total), priority=executor_pb2.PRIORITY_LOW)
        # the high-priority job arrives while low loads: low is surely still running (a tiny step takes ~25 ms, and
        # by the time a watcher saw step 3 low had once reached step 57 of 60), takes a step and yields
        watch_until(client, "low", lambda e: e.phase == progress_pb2.PHASE_LOADING)
        client.submit(fleet_plan(tiny_model, counting_data, "high", max_steps=8), priority=executor_pb2.PRIORITY_HIGH)
        high = all_events(client, "high")
        low = all_events(client, "low")
        jobs = {job_id: client.get(job_id) for job_id in ("low", "high")}
    assert high[-1].phase == progress_pb2.PHASE_DONE and low[-1].phase == progress_pb2.PHASE_DONE
    yielded = next(e for e in low if e.phase == progress_pb2.PHASE_QUEUED and e.sequence > 1)
    assert "preempted for job high: asked to checkpoint now within" in yielded.message
    saved = [e for e in low if e.phase == progress_pb2.PHASE_CHECKPOINTING and e.sequence < yielded.sequence]
    assert len(saved) == 1 and 1 <= saved[0].step < total, "it checkpoints when it yields (no other checkpoints)"
    resumed = next(e for e in low if e.phase == progress_pb2.PHASE_LOADING and "resumed from" in e.message)
    assert resumed.step == saved[0].step, "it resumes from the checkpoint it wrote when it yielded"
    assert low[-1].step == total
    assert jobs["high"].finished_at.ToNanoseconds() < resumed.time.ToNanoseconds(), "high ran while low waited"
    assert jobs["low"].infra_failures == 0, "a preemption is not a failure"
    assert_once_in_order(low)

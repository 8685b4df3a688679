"""Issue 28, item 2: a run that stops making progress is found hung, explained (which rank, where) and recovered
(requeued from its last checkpoint, an infrastructure failure) without anyone watching it."""

from __future__ import annotations

import time

import psutil
import pytest
from tunefleet.v1 import progress_pb2

from clients.executor_client import ExecutorClient
from contract.liveness import CHECKPOINT_FLOOR_FACTOR, RANK_MODULE
from fleet.recovery import FleetPolicy
from tests.integration.fleet_helpers import assert_once_in_order, events_at_end, fleet_plan, wait_for, watch_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
HANG_AFTER_S = 8.0
# The hang bound (a step here takes well under HANG_AFTER_S / factor; a rank may be stopped inside a checkpoint
# write, whose first one is allowed CHECKPOINT_FLOOR_FACTOR floors) plus the ranks' time to dump their stacks and
# the worker's supervision cadence.
DETECTION_BOUND_S = CHECKPOINT_FLOOR_FACTOR * HANG_AFTER_S + 15.0


def _rank(worker_pid: int, rank: int) -> psutil.Process | None:
    for p in psutil.Process(worker_pid).children(recursive=True):
        try:
            if RANK_MODULE in p.cmdline() and p.environ().get("RANK") == str(rank):
                return p
        except psutil.Error:
            continue
    return None


def test_a_stopped_rank_is_found_hung_named_and_its_job_resumes_to_done(start_service, start_worker, tiny_model,
                                                                          counting_data):
    service = start_service(policy=FleetPolicy(retry_backoff_s=1.0), sweep_interval_s=1.0)
    worker = start_worker("host-a", extra=("--hang-after-s", str(HANG_AFTER_S), "--hang-factor", "10"))
    total = 60  # a stuck rank stops every rank's steps: the run resumes from step 5 or later
    with ExecutorClient(service.address, timeout_s=60) as client:
        client.submit(fleet_plan(tiny_model, counting_data, "stuck", max_steps=total, ranks=2, checkpoint_every=5))
        # a few regular steps first: the hang bound scales with their time, not the first step's warm-up
        watch_until(client, "stuck", lambda e: e.phase == progress_pb2.PHASE_TRAINING and e.step >= 3)
        stuck = wait_for(lambda: _rank(worker.proc.pid, 1), "rank 1 of the run")
        stuck.suspend()  # SIGSTOP: it never completes another step, and neither can rank 0 (collectives)
        stopped_at = time.time()
        events = events_at_end(client, "stuck")  # DONE, or FAILED
        job = client.get("stuck")
    hung = next(e for e in events if e.phase == progress_pb2.PHASE_QUEUED and "hung" in e.message)
    assert f"rank 1 (pid {stuck.pid}) is stopped" in hung.message, hung.message
    assert "rank 0 waits in " in hung.message, hung.message
    detected_s = hung.time.ToNanoseconds() / 1e9 - stopped_at
    assert detected_s < DETECTION_BOUND_S, f"found hung after {detected_s:.0f} s"
    report = worker.work_dir / "stuck" / "logs" / f"hang-step-{hung.message.split('after step ')[1].split()[0]}.txt"
    assert "--- rank 0" in report.read_text() and "(most recent call first)" in report.read_text()
    assert events[-1].phase == progress_pb2.PHASE_DONE and events[-1].step == total, events[-1].message
    assert job.infra_failures == 1, "a hang is an infrastructure failure"
    assert any(e.phase == progress_pb2.PHASE_LOADING and e.sequence > hung.sequence for e in events), "it ran again"
    assert_once_in_order(events)


def test_a_stopped_rank_on_another_node_of_a_gang_is_found_hung_and_the_gang_resumes_to_done(
        start_service, start_worker, tiny_model, counting_data, tmp_path):
    service = start_service(policy=FleetPolicy(retry_backoff_s=1.0), sweep_interval_s=1.0)
    shared = tmp_path / "shared"
    hang = ("--hang-after-s", str(HANG_AFTER_S), "--hang-factor", "10")
    workers = {w.host_id: w for w in (start_worker("host-a", shared_dir=shared, extra=hang),
                                      start_worker("host-b", shared_dir=shared, extra=hang))}
    total = 60  # a stuck rank stops every rank's steps: the run resumes from step 5 or later
    with ExecutorClient(service.address, timeout_s=60) as client:
        wait_for(lambda: len(client.fleet().hosts) == 2, "both workers to register")
        client.submit(fleet_plan(tiny_model, counting_data, "gang-stuck", nodes=2, max_steps=total,
                                 checkpoint_every=5))
        watch_until(client, "gang-stuck", lambda e: e.phase == progress_pb2.PHASE_TRAINING and e.step >= 3)
        member = workers[({"host-a", "host-b"} - {client.get("gang-stuck").host_id}).pop()]
        stuck = wait_for(lambda: _rank(member.proc.pid, 1), "the member's rank (global rank 1)")
        stuck.suspend()
        stopped_at = time.time()
        events = events_at_end(client, "gang-stuck")
        job = client.get("gang-stuck")
    hung = next(e for e in events if e.phase == progress_pb2.PHASE_QUEUED and "hung" in e.message)
    assert "rank 1 (another node) wrote no stacks" in hung.message and "rank 0 waits in " in hung.message, \
        hung.message
    assert hung.time.ToNanoseconds() / 1e9 - stopped_at < DETECTION_BOUND_S
    assert events[-1].phase == progress_pb2.PHASE_DONE and events[-1].step == total, events[-1].message
    assert job.infra_failures == 1
    assert_once_in_order(events)

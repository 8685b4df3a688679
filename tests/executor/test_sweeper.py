"""Leases, fencing, the fleet sweep and pending reasons, against a real redis-server (no training here: the jobs
are real Submit records, the hosts real registry entries, and the holders act through the same calls a worker
makes)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis
from tunefleet.v1 import executor_pb2, plan_pb2, progress_pb2

from common.identity import Identities, Identity, Role
from contract.errors import LeaseLostError, PlanError
from contract.progress import new_event
from devtools.tiny import make_plan
from executor.service.outputs import check_shared_output
from executor.service.servicer import Executor
from executor.worker.control import JobControl
from executor.worker.supervision import Requeue
from fleet import connection, queues
from fleet.events import EventLog
from fleet.hosts import HostGpus, HostRegistry
from fleet.jobs import JobStore, now_ms
from fleet.keys import RETRYING, RUNNING_SET, job_key, lease_key
from fleet.leases import FenceGuard, Leases
from fleet.recovery import FleetPolicy, Sweeper, requeue_held
from planner.catalog import default_catalog
from tests.executor.worker_steps import take

CPU = HostGpus("cpu", 0, 0)
QUEUED, LOADING = progress_pb2.PHASE_QUEUED, progress_pb2.PHASE_LOADING
WAIT_S = 10.0
SHARED = Path("/mnt/fleet")  # the work dir the test hosts say they share


@pytest.fixture()
def fleet(redis_url: str) -> redis.Redis:
    return connection.connect(redis_url)


@pytest.fixture()
def executor(fleet: redis.Redis):  # type: ignore[no-untyped-def]
    ex = Executor(fleet, default_catalog())
    yield ex
    ex.close()


def _submit(executor: Executor, tiny_model: Path, data: Path, job_id: str,
            priority: int = executor_pb2.PRIORITY_NORMAL) -> None:
    plan = make_plan(tiny_model, data, SHARED / job_id, plan_id=job_id)
    executor.submit(executor_pb2.SubmitRequest(plan=plan, priority=priority))  # type: ignore[arg-type]


def _expire(fleet: redis.Redis, job_id: str) -> None:
    """Let the holder's lease lapse: it stops renewing, and the key expires on Redis's own clock."""
    fleet.pexpire(lease_key(job_id), 1)
    deadline = time.monotonic() + WAIT_S
    while fleet.exists(lease_key(job_id)):
        assert time.monotonic() < deadline, "the lease did not expire"


def _events(fleet: redis.Redis, job_id: str) -> list[progress_pb2.ProgressEvent]:
    return EventLog(fleet).read_after(job_id, 0, 100)


def test_a_claim_fences_out_the_previous_holder_everywhere_it_writes(fleet, executor, tiny_model, counting_data):
    _submit(executor, tiny_model, counting_data, "job-f")
    leases, events = Leases(fleet), EventLog(fleet)
    first = take(fleet, "job-f", "host-a")
    assert first == 1 and leases.renew("job-f", "host-a", first)
    assert leases.claim("job-f", "host-b", now_ms(), QUEUED, LOADING) == str(LOADING)  # held: nobody else claims
    _expire(fleet, "job-f")
    assert Sweeper(fleet).sweep().recovered == ["job-f"]

    # the lost holder comes back: every write it tries is refused
    assert not leases.renew("job-f", "host-a", first)
    with pytest.raises(LeaseLostError):
        events.publish(new_event("job-f", events.last_sequence("job-f") + 1, progress_pb2.PHASE_TRAINING, step=9),
                       fence=first)
    with pytest.raises(LeaseLostError):
        FenceGuard(fleet, "job-f", first).confirm()
    assert not requeue_held(fleet, "job-f", first, "drained")
    assert not leases.release("job-f", "host-a", first)
    assert all(e.step != 9 for e in _events(fleet, "job-f"))
    store, before = JobStore(fleet), fleet.hgetall(job_key("job-f"))
    stale_plan = plan_pb2.Plan(plan_id="a stale re-plan")
    for write in (lambda: store.record_output("job-f", first, "/stale/out", "/stale/log"),
                  lambda: store.record_error("job-f", first, "the stale holder's error"),
                  lambda: store.record_replan("job-f", first, stale_plan, 1)):  # every record write of a holder
        with pytest.raises(LeaseLostError):
            write()
    assert fleet.hgetall(job_key("job-f")) == before, "none of the stale holder's record writes landed"

    # the job, requeued after its backoff, is claimed anew with a newer fence
    Sweeper(fleet).sweep(now=now_ms() + 3_600_000)
    second = take(fleet, "job-f", "host-b")
    assert second > first
    FenceGuard(fleet, "job-f", second).confirm()
    store.record_output("job-f", second, "/new/out", "/new/out/logs/train.log")
    assert fleet.hget(job_key("job-f"), "output_dir") == b"/new/out", "the holder of the newer fence writes"
    assert events.publish(new_event("job-f", events.last_sequence("job-f") + 1, progress_pb2.PHASE_TRAINING,
                                    step=10), fence=second)


def test_a_lost_host_is_retried_with_growing_backoff_then_failed_past_the_limit(fleet, executor, tiny_model,
                                                                              counting_data):
    FleetPolicy(retry_limit=2, retry_backoff_s=10).save(fleet)
    _submit(executor, tiny_model, counting_data, "job-r")
    sweeper = Sweeper(fleet)
    waits = []
    for attempt in (1, 2):
        take(fleet, "job-r", f"host-{attempt}")
        _expire(fleet, "job-r")
        now = now_ms()
        assert sweeper.sweep(now=now).recovered == ["job-r"]
        record = fleet.hgetall(job_key("job-r"))
        assert int(record[b"phase"]) == QUEUED and int(record[b"infra_failures"]) == attempt
        assert not fleet.sismember(RUNNING_SET, "job-r")
        waits.append(int(fleet.zscore(RETRYING, "job-r")) - now)
        queue = record[b"queue"].decode()
        assert queues.JobQueues(fleet).position("job-r", queue) is None, "requeued before its backoff ended"
        assert sweeper.sweep(now=now + waits[-1] - 1).requeued == []
        assert sweeper.sweep(now=now + waits[-1]).requeued == ["job-r"]
        assert queues.JobQueues(fleet).position("job-r", queue) == 0, "a retry goes to the front of its queue"
    assert waits == [10_000, 20_000]
    retry_messages = [e.message for e in _events(fleet, "job-r") if e.phase == QUEUED][1:]
    assert "retry 1 of 2 in 10 s" in retry_messages[0] and "retry 2 of 2 in 20 s" in retry_messages[1]

    take(fleet, "job-r", "host-3")
    _expire(fleet, "job-r")
    sweeper.sweep()
    last = _events(fleet, "job-r")[-1]
    assert last.phase == progress_pb2.PHASE_FAILED and "past the fleet's retry limit of 2" in last.message
    assert fleet.zscore(RETRYING, "job-r") is None


def test_a_drained_job_goes_back_to_the_front_without_counting_a_failure(fleet, executor, tiny_model,
                                                                        counting_data):
    _submit(executor, tiny_model, counting_data, "job-d")
    _submit(executor, tiny_model, counting_data, "job-e")
    fence = take(fleet, "job-d", "host-a")
    assert requeue_held(fleet, "job-d", fence, "host-a is shutting down")
    record = fleet.hgetall(job_key("job-d"))
    assert int(record[b"phase"]) == QUEUED and int(record[b"infra_failures"]) == 0
    assert queues.JobQueues(fleet).queued_ids(record[b'queue'].decode()) == ["job-d", "job-e"]
    assert not fleet.exists(lease_key("job-d")) and not fleet.sismember(RUNNING_SET, "job-d")
    assert Sweeper(fleet).sweep().recovered == []


def test_preemption_asks_the_lowest_most_recent_job_to_yield_once_per_waiting_job(fleet, executor, tiny_model,
                                                                                  counting_data, tmp_path):
    registry = HostRegistry(fleet)
    for started_ms, (job_id, priority) in enumerate((("low-old", executor_pb2.PRIORITY_LOW),
                                                     ("low-new", executor_pb2.PRIORITY_LOW),
                                                     ("normal-1", executor_pb2.PRIORITY_NORMAL))):
        _submit(executor, tiny_model, counting_data, job_id, priority)
        take(fleet, job_id, f"host-{job_id}")
        fleet.hset(job_key(job_id), "started_at_ms", 1_000 + started_ms)  # low-new started last
        registry.heartbeat(f"host-{job_id}", CPU, job_id, [], SHARED, True)
    sweeper = Sweeper(fleet)
    assert sweeper.sweep().preempted == [], "preemption is off by default: strict queue order"

    FleetPolicy(preemption=True).save(fleet)
    _submit(executor, tiny_model, counting_data, "high-1", executor_pb2.PRIORITY_HIGH)
    assert sweeper.sweep().preempted == ["low-new"]
    assert sweeper.sweep().preempted == [], "one yield per waiting job"
    waiting = executor.get(executor_pb2.GetRequest(job_id="high-1")).job
    assert waiting.pending_reason == "waiting for job low-new to checkpoint and yield its host (preemption)"
    assert waiting.queue_position == 1

    _submit(executor, tiny_model, counting_data, "high-2", executor_pb2.PRIORITY_HIGH)
    assert sweeper.sweep().preempted == ["low-old"]
    _submit(executor, tiny_model, counting_data, "high-3", executor_pb2.PRIORITY_HIGH)
    assert sweeper.sweep().preempted == ["normal-1"]
    _submit(executor, tiny_model, counting_data, "normal-2", executor_pb2.PRIORITY_NORMAL)
    assert sweeper.sweep().preempted == [], "nothing lower than normal is left running"
    assert fleet.hget(job_key("low-new"), "preempted_for") == b"high-1"

    registry.heartbeat("host-idle", CPU, "", [], SHARED, True)
    _submit(executor, tiny_model, counting_data, "high-4", executor_pb2.PRIORITY_HIGH)
    assert sweeper.sweep().preempted == [], "an idle host takes the waiting job"


def test_the_victim_is_the_job_that_loses_the_least_work_and_never_one_younger_than_the_minimum(
        fleet, executor, tiny_model, counting_data):
    registry = HostRegistry(fleet)
    now = now_ms()
    # (job, held for, last step, last checkpoint): a yield now runs again the steps after the checkpoint
    running = {"long-checkpointed": (7_200, 100, 95),  # 2 h held, 5 % after its checkpoint: 360 GPU-s lost
               "hour-no-checkpoint": (3_600, 50, 0),  # 1 h held, nothing kept: 3,600 GPU-s lost
               "young": (60, 10, 0)}  # 60 s: under the minimum runtime
    for job_id, (held_s, step, checkpoint) in running.items():
        _submit(executor, tiny_model, counting_data, job_id, executor_pb2.PRIORITY_LOW)
        take(fleet, job_id, f"host-{job_id}")
        fleet.hset(job_key(job_id), mapping={
            "started_at_ms": now - held_s * 1000, "checkpoint_step": checkpoint, "hold_from_step": 0,
            "last_event": new_event(job_id, 9, progress_pb2.PHASE_TRAINING, step=step).SerializeToString()})
        registry.heartbeat(f"host-{job_id}", CPU, job_id, [], SHARED, True)
    FleetPolicy(preemption=True, preempt_min_runtime_s=300).save(fleet)
    sweeper = Sweeper(fleet)
    for n, victim in enumerate(["long-checkpointed", "hour-no-checkpoint"]):
        _submit(executor, tiny_model, counting_data, f"high-{n}", executor_pb2.PRIORITY_HIGH)
        assert sweeper.sweep(now).preempted == [victim]
    _submit(executor, tiny_model, counting_data, "high-2", executor_pb2.PRIORITY_HIGH)
    assert sweeper.sweep(now).preempted == [], "a job younger than the minimum runtime is never preempted"
    assert sweeper.sweep(now + 300_000).preempted == ["young"], "past the minimum it may be"


def test_a_team_waiting_within_its_quota_reclaims_a_borrowed_host_and_a_team_at_its_limit_is_told_why(
        fleet, executor, tiny_model, counting_data):
    from fleet.fairshare import FairShare
    from fleet.ordering import TeamShare

    registry = HostRegistry(fleet)
    FairShare(fleet).save_shares({"vision": TeamShare(quota_gpus={"cpu": 2}),
                                  "speech": TeamShare(quota_gpus={"cpu": 0}, borrow_gpus={"cpu": 2})})
    now = now_ms()
    for job_id, held_s, step, checkpoint in (("speech-1", 600, 40, 0), ("speech-2", 600, 40, 38)):
        _submit(executor, tiny_model, counting_data, job_id)
        fleet.hset(job_key(job_id), "team", "speech")
        take(fleet, job_id, f"host-{job_id}")
        fleet.hset(job_key(job_id), mapping={
            "started_at_ms": now - held_s * 1000, "checkpoint_step": checkpoint, "hold_from_step": 0,
            "last_event": new_event(job_id, 9, progress_pb2.PHASE_TRAINING, step=step).SerializeToString()})
        registry.heartbeat(f"host-{job_id}", CPU, job_id, [], SHARED, True)
    sweeper = Sweeper(fleet)
    assert sweeper.sweep(now).preempted == [], "nobody waits: borrowing idle GPUs is allowed"

    _submit(executor, tiny_model, counting_data, "speech-3")
    fleet.hset(job_key("speech-3"), "team", "speech")
    waiting = executor.get(executor_pb2.GetRequest(job_id="speech-3")).job
    assert waiting.pending_reason.startswith("waits for its team's limit: team speech holds 2 cpu GPU(s), against its "
                                             "quota of 0 plus 2 it may borrow"), waiting.pending_reason
    assert sweeper.sweep(now).preempted == [], "a team past its limit reclaims nothing"

    _submit(executor, tiny_model, counting_data, "vision-1")
    fleet.hset(job_key("vision-1"), "team", "vision")
    assert sweeper.sweep(now).preempted == ["speech-2"], "vision is within its quota: the borrower losing least yields"
    assert sweeper.sweep(now).preempted == [], "one yield per waiting job"
    assert fleet.hget(job_key("speech-2"), "preempted_for") == b"vision-1"
    assert executor.get(executor_pb2.GetRequest(job_id="vision-1")).job.pending_reason == \
        "waiting for job speech-2 to checkpoint and yield its host (a reclaim: its team borrows beyond its quota)"
    line = FairShare(fleet).line(queues.QueueRef("cpu", executor_pb2.PRIORITY_NORMAL).name)
    assert line.order == ["vision-1"] and line.held_back == ["speech-3"]
    standings = {(t.team, t.gpu_class): (t.held_gpus, t.quota_gpus, t.limit_gpus)
                 for t in executor.fleet(executor_pb2.FleetRequest()).teams}
    assert standings == {("speech", "cpu"): (2, 0, 2), ("vision", "cpu"): (0, 2, -1)}


def test_with_quotas_a_higher_tier_preempts_only_its_own_team_or_a_borrower(fleet, executor, tiny_model,
                                                                              counting_data):
    from fleet.fairshare import FairShare
    from fleet.ordering import TeamShare

    registry, leases = HostRegistry(fleet), Leases(fleet)
    FairShare(fleet).save_shares({"vision": TeamShare(quota_gpus={"cpu": 1}),
                                  "speech": TeamShare(quota_gpus={"cpu": 1})})
    FleetPolicy(preemption=True, preempt_checkpoint_s=120).save(fleet)
    now = now_ms()
    # vision runs its quota (one low-tier job), speech its quota and one borrowed host (two low-tier jobs); the job
    # that would lose least is vision's
    for job_id, team, checkpoint in (("vision-low", "vision", 39), ("speech-low-1", "speech", 0),
                                     ("speech-low-2", "speech", 10)):
        _submit(executor, tiny_model, counting_data, job_id, executor_pb2.PRIORITY_LOW)
        fleet.hset(job_key(job_id), "team", team)
        take(fleet, job_id, f"host-{job_id}")
        fleet.hset(job_key(job_id), mapping={
            "started_at_ms": now - 600_000, "checkpoint_step": checkpoint, "hold_from_step": 0,
            "last_event": new_event(job_id, 9, progress_pb2.PHASE_TRAINING, step=40).SerializeToString()})
        registry.heartbeat(f"host-{job_id}", CPU, job_id, [], SHARED, True)
    sweeper = Sweeper(fleet)
    _submit(executor, tiny_model, counting_data, "speech-high", executor_pb2.PRIORITY_HIGH)
    fleet.hset(job_key("speech-high"), "team", "speech")
    assert sweeper.sweep(now).preempted == ["speech-low-2"], "vision's job is within its quota: speech's own yields"
    assert int(fleet.hget(job_key("speech-low-2"), "preempt_deadline_ms")) == now + 120_000, "checkpoint within 120 s"
    control = JobControl(JobStore(fleet), leases, "host-speech-low-2", 30.0, threading.Event())
    told = control.stop_reason("speech-low-2", time.monotonic() + 3600, 3600, SHARED / "speech-low-2")
    assert told is not None and isinstance(told.outcome, Requeue) and told.checkpoint_first
    assert told.checkpoint_within_s is not None and 0 < told.checkpoint_within_s <= 120, "the worker's interrupt time"
    assert "preempted for job speech-high: asked to checkpoint now within" in told.outcome.message
    _submit(executor, tiny_model, counting_data, "speech-high-2", executor_pb2.PRIORITY_HIGH)
    fleet.hset(job_key("speech-high-2"), "team", "speech")
    assert sweeper.sweep(now).preempted == ["speech-low-1"], "its own team's job may yield to it"
    _submit(executor, tiny_model, counting_data, "speech-high-3", executor_pb2.PRIORITY_HIGH)
    fleet.hset(job_key("speech-high-3"), "team", "speech")
    assert sweeper.sweep(now).preempted == [], "never another team's job within its quota"


def test_get_and_fleet_say_why_a_job_waits_and_where_it_stands(fleet, executor, tiny_model, counting_data,
                                                               tmp_path):
    registry = HostRegistry(fleet)
    _submit(executor, tiny_model, counting_data, "n-1")
    job = executor.get(executor_pb2.GetRequest(job_id="n-1")).job
    assert job.pending_reason.startswith("no registered host has cpu") and job.queue_position == 1

    registry.heartbeat("host-a", CPU, "", [], SHARED, True)
    _submit(executor, tiny_model, counting_data, "n-2")
    _submit(executor, tiny_model, counting_data, "h-1", executor_pb2.PRIORITY_HIGH)
    job = executor.get(executor_pb2.GetRequest(job_id="n-2")).job
    assert job.queue_position == 3, "the high job and n-1 are ahead"
    assert job.pending_reason == "2 job(s) of cpu ahead of it (the start order: jobs within their team's quota, then " \
                                 "by tier, then by fair share)"

    take(fleet, "h-1", "host-a")
    registry.heartbeat("host-a", CPU, "h-1", [], SHARED, True)
    job = executor.get(executor_pb2.GetRequest(job_id="n-2")).job
    assert job.queue_position == 2
    assert job.pending_reason == "all 1 cpu host(s) are busy (job h-1); 1 job(s) ahead of it"
    running = executor.get(executor_pb2.GetRequest(job_id="h-1")).job
    assert running.pending_reason == "" and running.queue_position == 0

    _expire(fleet, "h-1")
    Sweeper(fleet).sweep()
    job = executor.get(executor_pb2.GetRequest(job_id="h-1")).job
    assert job.queue_position == 0 and job.infra_failures == 1
    assert job.pending_reason.startswith("retry 1 of 3 after host host-a stopped renewing its lease")
    pending = {p.job_id: p for p in executor.fleet(executor_pb2.FleetRequest()).pending}
    assert set(pending) == {"n-1", "n-2", "h-1"}
    assert pending["h-1"].position == 0 and pending["n-1"].position == 1 and pending["n-2"].position == 2
    assert executor.fleet(executor_pb2.FleetRequest()).policy.retry_limit == 3


def test_an_output_only_one_host_sees_is_refused_when_several_serve_the_class() -> None:
    def host(name: str, work_dir: str, shared: bool) -> executor_pb2.Host:
        return executor_pb2.Host(host_id=name, gpu_class="cpu", work_dir=work_dir, work_dir_shared=shared)

    alone = [host("a", "/local/a", False)]
    check_shared_output("relative/out", alone)  # one host: wherever it likes
    shared = [host("a", "/mnt/fleet", True), host("b", "/mnt/fleet", True)]
    check_shared_output("runs/x", shared)
    check_shared_output("/mnt/fleet/runs/x", shared)
    check_shared_output("file:///mnt/fleet/runs/x", shared)
    with pytest.raises(PlanError) as e:
        check_shared_output("/home/me/out", shared)
    assert e.value.field == "output_uri" and "under the shared work dir (/mnt/fleet)" in e.value.description
    with pytest.raises(PlanError) as e:
        check_shared_output("/mnt/fleetish/out", shared)
    mixed = [host("a", "/mnt/fleet", True), host("b", "/local/b", False)]
    with pytest.raises(PlanError) as e:
        check_shared_output("runs/x", mixed)
    assert "host(s) b of this class do not share" in e.value.description
    stored = [executor_pb2.Host(host_id=n, work_dir=f"/local/{n}", checkpoint_store="s3://b/fleet") for n in "ab"]
    check_shared_output("runs/x", stored)  # a one-node job resumes from the store every worker keeps
    with pytest.raises(PlanError) as e:
        check_shared_output("runs/x", stored, nodes=2)  # a gang's nodes write one checkpoint together
    assert "--work-dir-shared" in e.value.description
    with pytest.raises(PlanError) as e:
        check_shared_output("runs/x", [stored[0], host("b", "/local/b", False)])
    assert "with --checkpoint-store" in e.value.description, "a host without the store cannot resume the job"


def test_places_follow_the_replayed_start_order_and_a_held_back_reason_counts_the_jobs_ahead(
        fleet, executor, tiny_model, counting_data):
    """Issue 50 item 4: nlp (quota 1, may borrow nothing) runs nlp-1 and waits with nlp-2; vision (quota 1, may
    borrow 1) runs vis-1 and waits with vis-3, submitted first. nlp-1 ends first: nlp is back within its quota, so
    nlp-2 takes that host ahead of vis-3, which would borrow. Its place says so, and its reason counts what holds nlp
    at its limit now."""
    from fleet.fairshare import FairShare
    from fleet.ordering import TeamShare

    registry = HostRegistry(fleet)
    FairShare(fleet).save_shares({"nlp": TeamShare(quota_gpus={"cpu": 1}, borrow_gpus={"cpu": 0}),
                                  "vision": TeamShare(quota_gpus={"cpu": 1}, borrow_gpus={"cpu": 1})})
    now = now_ms()
    for job_id, team, eta_s in (("vis-1", "vision", 600), ("nlp-1", "nlp", 60)):
        _submit(executor, tiny_model, counting_data, job_id)
        fleet.hset(job_key(job_id), "team", team)
        take(fleet, job_id, f"host-{job_id}")
        fleet.hset(job_key(job_id), mapping={"started_at_ms": now - 60_000, "last_event": new_event(
            job_id, 9, progress_pb2.PHASE_TRAINING, step=5, eta_s=eta_s).SerializeToString()})
        registry.heartbeat(f"host-{job_id}", CPU, job_id, [], SHARED, True)
    for job_id, team in (("vis-3", "vision"), ("nlp-2", "nlp")):
        _submit(executor, tiny_model, counting_data, job_id)
        fleet.hset(job_key(job_id), "team", team)
    pending = {p.job_id: p for p in executor.fleet(executor_pb2.FleetRequest()).pending}
    assert (pending["nlp-2"].position, pending["vis-3"].position) == (1, 2), "nlp-2 starts first, as the workers will"
    assert pending["nlp-2"].reason == ("waits for its team's limit: team nlp holds 1 cpu GPU(s), against its quota of "
                                       "1 plus 0 it may borrow; it starts as the team's jobs end")
    got = executor.get(executor_pb2.GetRequest(job_id="vis-3")).job
    assert got.queue_position == 2, "Get and Fleet give one place"


def test_a_job_held_back_behind_its_own_teams_jobs_is_told_so(fleet, executor, tiny_model, counting_data):
    """Issue 50 item 4: nlp holds nothing and waits with nlp-a and nlp-b; nlp-a will take its quota of 1, so nlp-b
    waits for it — not 'over quota' while the team holds 0."""
    from fleet.fairshare import FairShare
    from fleet.ordering import TeamShare

    registry = HostRegistry(fleet)
    FairShare(fleet).save_shares({"nlp": TeamShare(quota_gpus={"cpu": 1}, borrow_gpus={"cpu": 0})})
    _submit(executor, tiny_model, counting_data, "vis-1")
    take(fleet, "vis-1", "host-1")
    registry.heartbeat("host-1", CPU, "vis-1", [], SHARED, True)
    for job_id in ("nlp-a", "nlp-b"):
        _submit(executor, tiny_model, counting_data, job_id)
        fleet.hset(job_key(job_id), "team", "nlp")
    reason = executor.get(executor_pb2.GetRequest(job_id="nlp-b")).job.pending_reason
    assert reason == ("waits for its team's limit: team nlp holds 0 cpu GPU(s) and its 1 job(s) ahead of it will take "
                      "1 more, against its quota of 1 plus 0 it may borrow; it starts as the team's jobs end")


def test_submit_takes_an_object_store_output_for_one_node_and_refuses_it_for_a_gang(
        executor, tiny_model, counting_data) -> None:
    plan = make_plan(tiny_model, counting_data, SHARED / "x", plan_id="to-s3")
    plan.output_uri = "s3://bucket/fleet/outputs/to-s3"
    assert executor.submit(executor_pb2.SubmitRequest(plan=plan)).created  # type: ignore[arg-type]
    plan.plan_id, plan.hardware.nodes = "gang-to-s3", 2
    with pytest.raises(PlanError) as e:
        executor.submit(executor_pb2.SubmitRequest(plan=plan))  # type: ignore[arg-type]
    assert e.value.field == "output_uri" and "every node mounts" in e.value.description


def test_a_team_s_default_store_is_the_output_of_its_one_node_jobs_that_name_none(
        executor, tiny_model, counting_data, tmp_path) -> None:
    ids = tmp_path / "identities.toml"
    ids.write_text(f'[[identity]]\nprincipal = "alice"\nteam = "vision"\nrole = "submitter"\ntoken_sha256 = '
                   f'"{"a" * 64}"\n\n[[team]]\nname = "vision"\nstore = "s3://outputs/vision/"\n')
    executor.accounts.identities = Identities.from_file(ids)
    alice = Identity("alice", "vision", Role.SUBMITTER)

    def submitted(plan_id: str, output_uri: str = "", nodes: int = 1) -> str:
        plan = make_plan(tiny_model, counting_data, Path(plan_id), plan_id=plan_id, nodes=nodes)
        plan.output_uri = output_uri
        return executor.submit(executor_pb2.SubmitRequest(plan=plan), alice).job.plan.output_uri  # type: ignore[arg-type]

    assert submitted("defaulted") == "s3://outputs/vision/defaulted"
    assert submitted("own", "s3://elsewhere/own") == "s3://elsewhere/own", "a plan's own output stands"
    assert submitted("gang", "", nodes=2) == "", "a gang's nodes need a shared mount, not the store"

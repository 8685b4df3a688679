"""Issue 50, done when: the two-team scenario an admin tried, end to end — two workers of class cpu, teams nlp and
vision each with a quota of one cpu GPU and one more to borrow, a budget on nlp, preemption on. vision fills both
hosts (one borrowed); nlp's job reclaims the borrowed host, started when its expected start (shown at submit) said;
nlp's over-budget job is refused, then an admin submits it for nlp, charged to nlp; vision's high-tier job preempts
vision's own normal-tier run, never nlp's run within its quota; the yielded runs resume at the step they reached.
Every answer nlp reads names no vision job, the reasons say what happens, and the ledger adds up per team.

A real executor service with an identities file, a real redis-server, two real `tunefleet worker` processes sharing
a work dir, real DeepSpeed training of a tiny model on the CPU."""

from __future__ import annotations

import time

import pytest
from google.protobuf import text_format
from tunefleet.v1 import executor_pb2, plan_pb2, progress_pb2

from clients.errors import FailedPrecondition
from clients.executor_client import ExecutorClient
from executor.service.scoping import fleet_id
from fleet.recovery import FleetPolicy
from tests.integration.fleet_helpers import events_at_end, fleet_plan, identities, wait_for, watch_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
PEOPLE = [("alice", "nlp", "submitter"), ("vic", "vision", "submitter"), ("root", "ops", "admin")]
BUDGET_USD = 5.0
TEAMS = f"""
[[team]]
name = "nlp"
quota_gpus = {{ cpu = 1 }}
borrow_gpus = {{ cpu = 1 }}
monthly_budget_usd = {BUDGET_USD}

[[team]]
name = "vision"
quota_gpus = {{ cpu = 1 }}
borrow_gpus = {{ cpu = 1 }}

[prices]
"cpu" = 1.0
"""
LONG = 100_000  # steps: a run that ends only when it is cancelled
HOUR_S = 3600.0
# What no expected start models: the dequeue and the launch of a run after its host is free (seconds, this machine).
START_SLACK_S = 15.0
VISION = ("vis-long-a", "vis-long-b", "vis-high")


def _claiming(plan: plan_pb2.Plan, duration_s: float) -> plan_pb2.Plan:
    """A plan whose duration the planner cannot predict (a model folder, the cpu class) is priced and timed by its own
    figure (executor.service.pricing)."""
    e = plan.prediction.estimate
    e.duration_s = e.duration_s_low = e.duration_s_high = duration_s
    return plan


def _shows_no_vision_job(alice: ExecutorClient) -> None:
    """Every answer nlp reads (Fleet, List, Get of each of its jobs) names no vision job, by plan id or fleet id."""
    answers = [alice.fleet(), alice.list_jobs()] + [alice.get(j.job_id) for j in alice.list_jobs().jobs]
    text = "\n".join(text_format.MessageToString(a) for a in answers)
    for job_id in VISION:
        assert job_id not in text and fleet_id(job_id, "vision") not in text, f"nlp reads {job_id}:\n{text}"


def _running(client: ExecutorClient, job_id: str) -> bool:
    return client.get(job_id).phase == progress_pb2.PHASE_TRAINING


def test_two_teams_quotas_reclaim_budget_override_and_preemption_end_to_end(start_service, start_worker, tiny_model,
                                                                           counting_data, tmp_path):
    service = start_service(identities=identities(tmp_path / "auth.toml", PEOPLE, TEAMS), sweep_interval_s=0.5,
                            policy=FleetPolicy(preemption=True, preempt_min_runtime_s=0))
    shared = tmp_path / "shared"
    shared.mkdir()
    start_worker("host-a", shared_dir=shared)
    start_worker("host-b", shared_dir=shared)
    with ExecutorClient(service.address, token="alice-token", timeout_s=30) as alice, \
            ExecutorClient(service.address, token="vic-token", timeout_s=30) as vic, \
            ExecutorClient(service.address, token="root-token", timeout_s=30) as root:
        # vision fills both hosts: one within its quota, one borrowed
        for job_id in VISION[:2]:
            vic.submit(_claiming(fleet_plan(tiny_model, counting_data, job_id, max_steps=LONG, checkpoint_every=5),
                                 HOUR_S))
        wait_for(lambda: all(_running(vic, j) for j in VISION[:2]), "vision's two runs to train", 240)

        # nlp's job, within its quota, reclaims the borrowed host: its expected start, shown at submit, says so
        alice.submit(_claiming(fleet_plan(tiny_model, counting_data, "nlp-short", max_steps=4), 30.0))
        asked = alice.get("nlp-short")
        assert asked.phase == progress_pb2.PHASE_QUEUED
        earliest, latest = asked.expected_start_earliest.ToMilliseconds(), asked.expected_start_latest.ToMilliseconds()
        assert latest - time.time() * 1000 < 600_000, \
            f"the reclaim is modelled: not an hour's wait for a vision run to end ({asked.expected_start})"
        assert "vision" in asked.pending_reason or "busy" in asked.pending_reason, asked.pending_reason
        _shows_no_vision_job(alice)
        wait_for(lambda: alice.get("nlp-short").HasField("started_at"), "nlp's job to start", 240)
        started = alice.get("nlp-short").started_at.ToMilliseconds()
        assert earliest <= started <= latest + START_SLACK_S * 1000, \
            f"started {started}, shown at submit {earliest}..{latest}"
        reclaimed = next(j for j in VISION[:2] if vic.get(j).phase == progress_pb2.PHASE_QUEUED)
        kept = next(j for j in VISION[:2] if j != reclaimed)
        newest = vic.get(reclaimed).last_event.sequence  # its events up to now, through Watch's replay
        so_far = watch_until(vic, reclaimed, lambda e: e.sequence >= newest)
        yield_event = next(e for e in so_far if e.phase == progress_pb2.PHASE_QUEUED and e.sequence > 1)
        assert yield_event.message.startswith("reclaimed for a job of team nlp, within its team's quota"), \
            yield_event.message
        assert "nlp-short" not in yield_event.message, \
            yield_event.message
        _shows_no_vision_job(alice)

        # nlp's over-budget job is refused; an admin submits it for nlp: nlp's job, charged to nlp, audited as both
        big = _claiming(fleet_plan(tiny_model, counting_data, "nlp-big", max_steps=2), 30 * HOUR_S)  # $30 against $5
        with pytest.raises(FailedPrecondition) as refused:
            alice.submit(big)
        assert "budget" in str(refused.value)
        job = root.submit(big, override_budget=True, team="nlp").job
        assert (job.team, job.submitter) == ("nlp", "root")
        assert alice.usage().month_committed_usd >= 30.0, "committed against nlp's month, not ops'"
        assert alice.cancel("nlp-big").phase == progress_pb2.PHASE_CANCELLED, "nlp sees and cancels its own job"
        audit = [e for e in root.audit() if e.target in ("nlp-big", fleet_id("nlp-big", "nlp"))]
        assert any(e.action == "submit" and e.principal == "root" and "for team nlp" in e.detail for e in audit)
        assert any(e.action == "denied:submit" and e.principal == "alice" and "over its $5.00 budget" in e.detail
                   for e in audit), "the refusal is audited"

        # vision's high-tier job preempts vision's own normal-tier run, never nlp's run within its quota
        vic.submit(fleet_plan(tiny_model, counting_data, "vis-high", max_steps=2), priority=executor_pb2.PRIORITY_HIGH)
        high = events_at_end(vic, "vis-high", 240)
        assert high[-1].phase == progress_pb2.PHASE_DONE, high[-1].message
        short = events_at_end(alice, "nlp-short", 240)
        assert short[-1].phase == progress_pb2.PHASE_DONE, short[-1].message
        assert not any("yield" in e.message for e in short), "nlp's run within its quota is never a victim"
        _shows_no_vision_job(alice)

        # the yielded vision runs resume at the step they reached; then they are cancelled
        wait_for(lambda: all(_running(vic, j) for j in VISION[:2]), "vision's runs to run again", 240)
        for job_id in VISION[:2]:
            vic.cancel(job_id)
        ends = {job_id: events_at_end(vic, job_id, 240) for job_id in VISION[:2]}
        for job_id, events in ends.items():
            yields = [e for e in events if e.phase == progress_pb2.PHASE_QUEUED and e.sequence > 1]
            for y in yields:
                saved = max((e.step for e in events if e.phase == progress_pb2.PHASE_CHECKPOINTING
                             and e.sequence < y.sequence), default=0)
                resumed = next(e for e in events if e.sequence > y.sequence and "resumed from" in e.message)
                assert resumed.step == saved, f"{job_id} resumed at {resumed.step}, its checkpoint was {saved}"
        assert any(e.phase == progress_pb2.PHASE_QUEUED and e.sequence > 1 for e in ends[reclaimed])
        assert any("preempted for job vis-high" in e.message for events in ends.values() for e in events), \
            "vis-high preempted one of vision's own runs"
        assert kept in ends

        # the ledger adds up per team: each team's usage is its own jobs' holds, nothing of the other's
        def charged(client: ExecutorClient, job_ids: tuple[str, ...]) -> bool:
            rows = {r.key: r for r in client.usage().rows}
            return all(client.get(j).gpu_seconds > 0 for j in job_ids) and set(rows) == set(job_ids)

        wait_for(lambda: charged(alice, ("nlp-short",)), "nlp's hold to be charged")
        wait_for(lambda: charged(vic, VISION), "vision's holds to be charged")
        for client, job_ids in ((alice, ("nlp-short",)), (vic, VISION)):
            usage = client.usage()
            jobs = [client.get(j) for j in job_ids]
            assert usage.total.gpu_seconds == pytest.approx(sum(j.gpu_seconds for j in jobs), rel=1e-6)
            assert usage.total.cost_usd == pytest.approx(sum(j.spent_usd for j in jobs), rel=1e-6)
        assert alice.usage().month_spent_usd == pytest.approx(alice.get("nlp-short").spent_usd, rel=1e-6)

"""Issue 58 (budgets that cannot be bypassed) and issue 50 item 1 (an admin submits for a team): Move prices a job on
its new class under the same budget rule as Submit; the fleet prices and times a job by its own prediction, never
the plan's; concurrent Submits cannot pass a budget together; a run past its budgeted hold is stopped, checkpointed,
when its team would pass its budget; an admin's job for a team is that team's. A real executor service over a real
redis-server, real workers where a run is needed."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from tunefleet.v1 import plan_pb2, progress_pb2

from clients.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied, Unauthenticated
from clients.executor_client import ExecutorClient
from common.units import GiB
from executor.service import pricing
from executor.service.scoping import fleet_id
from fleet import queues
from fleet.connection import connect
from fleet.hosts import HostGpus, HostRegistry
from fleet.keys import job_key
from planner.catalog import default_catalog
from tests.integration.fleet_helpers import checkpoint_states, events_at_end, fleet_plan, identities, wait_for
from tests.integration.test_move import _a100_plan

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
CPU_USD_PER_GPU_HOUR = 3600.0  # $1 a GPU-second on the cpu class
BUDGET_USD = 5.0


TEAMS = f"""
[[team]]
name = "nlp"
monthly_budget_usd = {BUDGET_USD}

[[team]]
name = "vision"
"""


def _service(start_service, tmp_path: Path, prices: str = f'"cpu" = {CPU_USD_PER_GPU_HOUR}', **config: object):
    people = [("alice", "nlp", "submitter"), ("vic", "vision", "submitter"), ("root", "ops", "admin")]
    return start_service(identities=identities(tmp_path / "auth.toml", people, f"{TEAMS}\n[prices]\n{prices}\n"),
                         **config)


def _claiming(plan: plan_pb2.Plan, duration_s: float) -> plan_pb2.Plan:
    e = plan.prediction.estimate
    e.duration_s = e.duration_s_low = e.duration_s_high = duration_s
    return plan


def test_move_prices_the_job_on_its_new_class_under_the_budget(start_service, redis_url, counting_data, tmp_path):
    service = _service(start_service, tmp_path, prices='"a100-80gb" = 1.0\n"l4-24gb" = 10.0')
    HostRegistry(connect(redis_url)).heartbeat("l4-host", HostGpus("l4-24gb", 1, 22 * GiB), "", [], tmp_path, True)
    with ExecutorClient(service.address, token="alice-token", timeout_s=30) as alice:
        queued = alice.submit(_a100_plan(counting_data)).job
        assert 0 < queued.cost_high_usd < 1, "830 s of an A100 at $1 an hour"
        with pytest.raises(FailedPrecondition) as over:
            alice.move("llama-qlora", "l4-24gb")
        assert "team nlp:" in str(over.value) and "over its $5.00 budget" in str(over.value)
        assert "this job $9.2" in str(over.value), "an L4 takes about 55 min at $10 an hour"
        kept = alice.get("llama-qlora")
        assert (kept.queue, kept.cost_high_usd) == (queued.queue, queued.cost_high_usd), "a refused move changed it"
        assert alice.usage().month_committed_usd == pytest.approx(queued.cost_high_usd)


def test_the_fleet_prices_and_times_a_job_by_its_own_prediction(start_service, redis_url, counting_data, tmp_path):
    service = _service(start_service, tmp_path, prices='"a100-80gb" = 1.0')
    fleet = connect(redis_url)
    own = pricing.fleet_estimate(_a100_plan(counting_data), default_catalog())
    assert own is not None and own.duration_s_high > 600
    with ExecutorClient(service.address, token="alice-token", timeout_s=30) as alice, \
            ExecutorClient(service.address, token="root-token", timeout_s=30) as root:
        cheap = alice.submit(_claiming(_a100_plan(counting_data), 0.001)).job
        assert cheap.cost_high_usd == pytest.approx(own.duration_s_high / 3600), "the fleet's figure, not $0.0000003"
        stored = job_key(fleet_id("llama-qlora", "nlp"))  # the fleet's id of nlp's job (executor.service.scoping)
        assert int(fleet.hget(stored, "timeout_s")) == queues.job_timeout_s(own.duration_s)
        said = [e.detail for e in root.audit() if e.action == "submit" and e.target == fleet_id("llama-qlora", "nlp")]
        assert said and "the plan said up to 0.00 h, the fleet predicts up to 0.23 h" in said[0]
        alice.cancel("llama-qlora")

        month = _a100_plan(counting_data)
        month.plan_id = "thirty-days"
        long = alice.submit(_claiming(month, 30 * 86_400)).job
        assert long.cost_high_usd == pytest.approx(cheap.cost_high_usd)
        assert int(fleet.hget(job_key(fleet_id("thirty-days", "nlp")), "timeout_s")) < 2 * 3600, "not 30 days × 3"


def test_a_cpu_class_job_is_priced_and_timed_by_the_planners_cpu_host_class(start_service, tiny_model, counting_data,
                                                                             tmp_path):
    """Issue 50 item 13: the cpu class is the planner's CPU host class (planner.data.cpus), so a cpu job whose plan
    carries its model's shape gets the fleet's own prediction — seconds of this machine's steps and start-up — where
    the planner once knew no 'cpu' and the plan's claim of 30 days stood."""
    service = _service(start_service, tmp_path)  # $1 a GPU-second on the cpu class
    plan = _claiming(fleet_plan(tiny_model, counting_data, "cpu-known", max_steps=8), 30 * 86_400)
    plan.model.config_json = (tiny_model / "config.json").read_text()  # the shape, beside the weights' folder
    own = pricing.fleet_estimate(plan, default_catalog())
    assert own is not None and 1.0 < own.duration_s_high < 60.0, "a tiny job on a CPU host: seconds"
    with ExecutorClient(service.address, token="vic-token", timeout_s=30) as vic, \
            ExecutorClient(service.address, token="root-token", timeout_s=30) as root:
        job = vic.submit(plan).job
        assert job.cost_high_usd == pytest.approx(own.duration_s_high), "$1 a second of the fleet's upper figure"
        said = [e.detail for e in root.audit() if e.action == "submit" and e.target == fleet_id("cpu-known", "vision")]
        assert said and "the fleet predicts up to 0.00 h" in said[0]


def test_concurrent_submits_cannot_pass_the_budget_together(start_service, tiny_model, counting_data, tmp_path):
    service = _service(start_service, tmp_path)
    accepted: list[str] = []
    refused: list[str] = []
    ready = threading.Barrier(20)

    def submit(k: int) -> None:
        plan = _claiming(fleet_plan(tiny_model, counting_data, f"race-{k}"), 2.45)  # $2.45 each against $5
        with ExecutorClient(service.address, token="alice-token", timeout_s=60) as alice:
            alice.who_am_i()  # the channel is up before the race starts
            ready.wait(timeout=60)
            try:
                accepted.append(alice.submit(plan).job.job_id)
            except FailedPrecondition as e:
                refused.append(str(e))

    threads = [threading.Thread(target=submit, args=(k,)) for k in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(accepted) == 2 and len(refused) == 18, (accepted, refused[:2])
    assert all("over its $5.00 budget" in r for r in refused)
    with ExecutorClient(service.address, token="alice-token", timeout_s=30) as alice:
        assert alice.usage().month_committed_usd == pytest.approx(4.90)


def test_a_run_past_its_budgeted_hold_is_checkpointed_and_stopped(start_service, start_worker, tiny_model,
                                                                  counting_data, tmp_path):
    service = _service(start_service, tmp_path, sweep_interval_s=0.5)
    shared = tmp_path / "shared"
    shared.mkdir()
    plan = _claiming(fleet_plan(tiny_model, counting_data, "overrun", max_steps=100_000), 1.0)  # claims $1
    with ExecutorClient(service.address, token="alice-token", timeout_s=30) as alice:
        assert alice.submit(plan).job.cost_high_usd == pytest.approx(1.0)
        start_worker("host-a", shared_dir=shared)
        events = events_at_end(alice, "overrun")
        end = events[-1]
        assert end.phase == progress_pb2.PHASE_CANCELLED, end.message
        assert end.message.startswith("stopped by the fleet at $"), end.message
        assert "team nlp's month" in end.message and "passes its $5.00 budget" in end.message
        assert any(e.phase == progress_pb2.PHASE_TRAINING for e in events), "it ran before it was stopped"
        assert checkpoint_states(shared / "overrun"), "it checkpointed before it stopped"
        wait_for(lambda: alice.get("overrun").gpu_seconds > 0, "the stopped hold to be charged")
        assert alice.usage().month_spent_usd > BUDGET_USD - 1.0


def test_an_admin_submits_for_a_team_and_the_job_is_that_teams(start_service, tiny_model, counting_data, tmp_path):
    service = _service(start_service, tmp_path)
    with ExecutorClient(service.address, token="root-token", timeout_s=30) as root, \
            ExecutorClient(service.address, token="alice-token", timeout_s=30) as alice, \
            ExecutorClient(service.address, token="vic-token", timeout_s=30) as vic:
        big = _claiming(fleet_plan(tiny_model, counting_data, "nlp-5"), 30.0)  # $30 against nlp's $5
        with pytest.raises(FailedPrecondition):
            alice.submit(big)
        with pytest.raises(InvalidArgument) as unknown:
            root.submit(big, override_budget=True, team="nlpp")
        assert unknown.value.violations[0].field == "team" and "knows nlp, ops, vision" in str(unknown.value)
        with pytest.raises(PermissionDenied):
            vic.submit(big, team="nlp")

        job = root.submit(big, override_budget=True, team="nlp").job
        assert (job.team, job.submitter) == ("nlp", "root")
        assert alice.get("nlp-5").team == "nlp", "the team sees its own job"
        assert alice.usage().month_committed_usd == pytest.approx(30.0), "committed against nlp, not ops"
        entry = next(e for e in root.audit() if e.action == "submit" and e.target == fleet_id("nlp-5", "nlp"))
        assert job.job_id == fleet_id("nlp-5", "nlp"), "an admin names every team's jobs by their fleet ids"
        assert (entry.principal, entry.team) == ("root", "ops")
        assert "for team nlp; admin override of team nlp's $5.00 budget" in entry.detail

        own = vic.submit(fleet_plan(tiny_model, counting_data, "nlp-5"))  # ids are scoped per team (issue 58 item 8)
        assert own.created and (own.job.job_id, own.job.team) == ("nlp-5", "vision")
        assert (alice.get("nlp-5").team, vic.get("nlp-5").team) == ("nlp", "vision"), "each team sees its own nlp-5"


def test_refused_attempts_are_audited_with_their_reason_and_details_are_never_cut(start_service, tiny_model,
                                                                                 counting_data, tmp_path):
    service = _service(start_service, tmp_path)
    with ExecutorClient(service.address, token="root-token", timeout_s=30) as root, \
            ExecutorClient(service.address, token="alice-token", timeout_s=30) as alice, \
            ExecutorClient(service.address, token="vic-token", timeout_s=30) as vic, \
            ExecutorClient(service.address, token="not-a-token", timeout_s=30) as stranger:
        alice.submit(_claiming(fleet_plan(tiny_model, counting_data, "nlp-own"), 1.0))
        with pytest.raises(FailedPrecondition):
            alice.submit(_claiming(fleet_plan(tiny_model, counting_data, "nlp-big"), 30.0))
        with pytest.raises(NotFound):
            vic.cancel("nlp-own")
        with pytest.raises(PermissionDenied):
            vic.submit(fleet_plan(tiny_model, counting_data, "nlp-own"), team="nlp")
        with pytest.raises(Unauthenticated):
            stranger.get("nlp-own")
        root.submit(_claiming(fleet_plan(tiny_model, counting_data, "nlp-5"), 30.0), override_budget=True,
                    team="nlp")
        denied = {(e.principal, e.action, e.target): e.detail for e in root.audit() if e.action.startswith("denied:")}
    assert "over its $5.00 budget" in denied[("alice", "denied:submit", "nlp-big")]
    assert not any(who == "vic" and action == "denied:cancel" for who, action, _ in denied), \
        "vic's 'nlp-own' is an id of vision's own, which no job has: nothing of nlp's was reached"
    assert "needs the admin role" in denied[("vic", "denied:submit", "nlp-own")]
    assert denied[("(unauthenticated)", "denied:call", "/tunefleet.v1.ExecutorService/Get")] == \
        "a token the fleet does not know"
    shown = subprocess.run([sys.executable, "-m", "launch", "audit", "--executor", service.address, "--token",
                            "root-token"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "for team nlp; admin override of team nlp's $5.00 budget" in shown.stdout, "the detail is shown whole"

"""Issue 24, budgets and the ledger: Submit prices a plan at the fleet's price and refuses one that would take its
team past its monthly budget (spent + committed + this job), an admin may override (audited), and a job that ran
is charged what its hold measured, reported by `tunefleet usage`. A real service, a real worker, real Redis."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest
from tunefleet.v1 import executor_pb2, progress_pb2

from clients.errors import FailedPrecondition, PermissionDenied
from clients.executor_client import ExecutorClient
from common.identity import Identities, token_sha256
from executor.service.scoping import fleet_id
from planner import calibration
from tests.integration.fleet_helpers import events_at_end, fleet_plan, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
PRICE_PER_GPU_HOUR = 3600.0  # $1 a GPU-second: the tiny run's cost is its seconds
PREDICTED_HIGH_S = 100.0  # each plan's upper bound: $100 committed
AUTH = f"""
[[identity]]
principal = "alice"
team = "vision"
role = "submitter"
token_sha256 = "{token_sha256("alice-token")}"

[[identity]]
principal = "root"
team = "ops"
role = "admin"
token_sha256 = "{token_sha256("root-token")}"

[[team]]
name = "vision"
monthly_budget_usd = 150.0

[[team]]
name = "ops"
monthly_budget_usd = 10.0

[prices]
"cpu" = {PRICE_PER_GPU_HOUR}
"""


def _plan(tiny_model: Path, data: Path, job_id: str):  # noqa: ANN202 - a Plan
    plan = fleet_plan(tiny_model, data, job_id, max_steps=4)
    e = plan.prediction.estimate
    e.duration_s, e.duration_s_low, e.duration_s_high = 50.0, 25.0, PREDICTED_HIGH_S
    e.step_time_s = 0.5  # what the run's Feedback compares its measured step time with (tunefleet calibrate)
    return plan


def test_a_team_is_held_to_its_budget_and_charged_what_its_jobs_measured(start_service, start_worker, tiny_model,
                                                                       counting_data, tmp_path):
    auth = tmp_path / "auth.toml"
    auth.write_text(AUTH)
    service = start_service(identities=Identities.from_file(auth))
    with ExecutorClient(service.address, token="alice-token", timeout_s=60) as alice, \
            ExecutorClient(service.address, token="root-token", timeout_s=60) as root:
        first = alice.submit(_plan(tiny_model, counting_data, "first")).job
        assert (first.price_usd_per_gpu_hour, first.cost_high_usd) == (PRICE_PER_GPU_HOUR, PREDICTED_HIGH_S)
        with pytest.raises(FailedPrecondition) as over:
            alice.submit(_plan(tiny_model, counting_data, "second"))
        assert "team vision: spent $0.00 + committed $100.00 + this job $100.00" in str(over.value)
        assert "over its $150.00 budget" in str(over.value)
        with pytest.raises(PermissionDenied):
            alice.submit(_plan(tiny_model, counting_data, "second"), override_budget=True)

        start_worker("host-a")
        events = events_at_end(alice, "first")
        assert events[-1].phase == progress_pb2.PHASE_DONE
        # the hold is charged when the worker lets go of the job, just after the run's last event
        wait_for(lambda: alice.get("first").gpu_seconds > 0, "the first job's hold to be charged")
        done = alice.get("first")
        assert done.gpu_seconds > 0 and done.lost_gpu_seconds == 0
        assert done.spent_usd == pytest.approx(done.gpu_seconds / 3600 * PRICE_PER_GPU_HOUR)

        # what the job spent is now spent, not committed: the second job fits when the first cost under $50
        report = alice.usage()
        assert [r.key for r in report.rows] == ["first"] and report.total.cost_usd == pytest.approx(done.spent_usd)
        assert report.month_budget_usd == 150.0 and report.month_committed_usd == 0
        assert report.month_spent_usd == pytest.approx(done.spent_usd)
        if done.spent_usd < 50:
            assert alice.submit(_plan(tiny_model, counting_data, "second")).created
            alice.cancel("second")  # it was admitted; running it would only slow the test's end

        # an admin's own team is held to its budget too; an override queues it and says so in the audit
        with pytest.raises(FailedPrecondition):
            root.submit(_plan(tiny_model, counting_data, "ops-1"))
        assert root.submit(_plan(tiny_model, counting_data, "ops-1"), override_budget=True).created
        assert any(e.target == fleet_id("ops-1", "ops") and "admin override" in e.detail for e in root.audit())
        root.cancel("ops-1")
        by_team = {r.key: r for r in root.usage(group_by=executor_pb2.USAGE_GROUPING_TEAM).rows}
        assert by_team["vision"].cost_usd == pytest.approx(done.spent_usd)

    out = subprocess.run([sys.executable, "-m", "launch", "usage", "--by", "team", "--csv", "--executor",
                          service.address, "--token", "alice-token"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert rows[0]["team"] == "vision" and float(rows[0]["cost_usd"]) == pytest.approx(done.spent_usd, abs=0.01)
    assert rows[-1]["team"] == "total"

    # issue 25, item 5: the real run's Feedback calibrates its class (a CPU run: its step time, no GPU memory)
    cal_file = tmp_path / "calibration.json"
    calibrated = subprocess.run([sys.executable, "-m", "launch", "calibrate", "--out", str(cal_file),
                                 "--executor", service.address, "--token", "root-token"],
                                capture_output=True, text=True, timeout=60)
    assert calibrated.returncode == 0 and "cpu" in calibrated.stdout, calibrated.stderr
    runs = calibration.load(cal_file)["cpu"].runs
    feedback = done.feedback
    assert len(runs) == 1 and runs[0].allocated_ratio == 0
    assert runs[0].step_time_ratio == pytest.approx(feedback.measured_step_time_s / feedback.predicted_step_time_s)

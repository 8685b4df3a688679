"""Issue 50 item 2, issue 58 items 4, 8 and 13, issue 50 item 14: another team's job is never named to a caller — not
in Fleet's hosts, pending reasons or List's page tokens (shown as "a job of team X") — bad tokens and names are
INVALID_ARGUMENT naming the field (an output may not squat the parent of every default output), and a caller without
a token hears how to give one, with an exit code of its own. A real executor service over a real redis-server; hosts
registered as workers register theirs (the jobs stay queued)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format

from clients.errors import InvalidArgument
from clients.executor_client import ExecutorClient
from common.exit_status import UNAUTHENTICATED
from common.identity import Identities
from common.units import GiB
from executor.service.scoping import fleet_id
from fleet.connection import connect
from fleet.hosts import HostGpus, HostRegistry
from tests.integration.fleet_helpers import fleet_plan, identities

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
SECRET = "vis-secret"  # every vision job id starts with it: no answer to nlp may contain it


def _auth(tmp_path: Path) -> Identities:
    return identities(tmp_path / "auth.toml", [("vic", "vision", "submitter"), ("nora", "nlp", "submitter")])


def test_another_teams_jobs_are_shown_by_their_team_only(start_service, redis_url, tiny_model, counting_data,
                                                         tmp_path):
    service = start_service(identities=_auth(tmp_path))
    registry = HostRegistry(connect(redis_url))
    with ExecutorClient(service.address, token="vic-token", timeout_s=30) as vic, \
            ExecutorClient(service.address, token="nora-token", timeout_s=30) as nora:
        for k in range(3):
            vic.submit(fleet_plan(tiny_model, counting_data, f"{SECRET}-{k}"))
        for k in range(3):
            nora.submit(fleet_plan(tiny_model, counting_data, f"nlp-{k}"))
        # hosts run jobs by their fleet ids (executor.service.scoping), as workers report them
        registry.heartbeat("host-a", HostGpus("cpu", 1, 8 * GiB), fleet_id(f"{SECRET}-0", "vision"), [], tmp_path, True)
        registry.heartbeat("host-b", HostGpus("cpu", 1, 8 * GiB), fleet_id("nlp-0", "nlp"), [], tmp_path, True)

        seen = nora.fleet()
        assert SECRET not in text_format.MessageToString(seen), "a vision job id in nlp's Fleet answer"
        hosts = {h.host_id: h for h in seen.hosts}
        assert (hosts["host-a"].running_job_id, hosts["host-a"].running_team) == ("", "vision")
        assert (hosts["host-b"].running_job_id, hosts["host-b"].running_team) == ("nlp-0", "nlp")
        reasons = [p.reason for p in seen.pending if p.job_id.startswith("nlp-")]
        assert reasons and all("(a job of team vision, job nlp-0)" in r for r in reasons), reasons
        assert {p.job_id for p in seen.pending} == {"nlp-0", "nlp-1", "nlp-2"}, "only its own pending jobs"
        assert "vision" not in {p.team for p in seen.pending}
        own = vic.fleet()
        assert {h.running_job_id for h in own.hosts} == {f"{SECRET}-0", ""}, "vision sees its own job's id"

        for job_id in ("nlp-1", "nlp-2"):
            got = nora.get(job_id)
            assert SECRET not in got.pending_reason and "a job of team vision" in got.pending_reason

        token, listed = "", []
        while True:
            page = nora.list_jobs(page_size=1, page_token=token)
            listed += [j.job_id for j in page.jobs]
            assert SECRET not in page.next_page_token
            token = page.next_page_token
            if not token:
                break
        assert listed == ["nlp-2", "nlp-1", "nlp-0"], "every page of nlp's own jobs, newest first"

        shown = subprocess.run([sys.executable, "-m", "launch", "fleet", "--executor", service.address,
                                "--token", "nora-token"], capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert "a job of team vision" in shown.stdout and SECRET not in shown.stdout


def test_bad_tokens_and_names_are_the_callers_mistake(start_service, tiny_model, counting_data, tmp_path):
    service = start_service(identities=_auth(tmp_path))
    with ExecutorClient(service.address, token="nora-token", timeout_s=30) as nora:
        for token in ("²:x", "1:" + "9" * 40, "١٢:3"):
            with pytest.raises(InvalidArgument) as bad:
                nora.list_jobs(page_token=token)
            assert bad.value.violations[0].field == "page_token"
        plan = fleet_plan(tiny_model, counting_data, "long-name")
        plan.output_uri = "runs/" + "x" * 300
        with pytest.raises(InvalidArgument) as long:
            nora.submit(plan)
        assert long.value.violations[0].field == "output_uri" and "at most 255 bytes per name" in str(long.value)
        for squat in ("runs", "runs/", "./runs", "file://runs"):  # every later planner-made plan writes runs/<id>
            plan.output_uri = squat
            with pytest.raises(InvalidArgument) as parent:
                nora.submit(plan)
            assert parent.value.violations[0].field == "output_uri" and "no job may claim it" in str(parent.value)

    nobody = subprocess.run([sys.executable, "-m", "launch", "jobs", "--executor", service.address],
                            capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert nobody.returncode == UNAUTHENTICATED, nobody.stderr
    assert "no token was given" in nobody.stderr and "--token, the TUNEFLEET_TOKEN" in nobody.stderr
    wrong = subprocess.run([sys.executable, "-m", "launch", "jobs", "--executor", service.address, "--token",
                            "guess"], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert wrong.returncode == UNAUTHENTICATED and "does not accept the token given" in wrong.stderr

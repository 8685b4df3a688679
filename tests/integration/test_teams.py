"""Issue 24, identities and roles: teams on one fleet cannot see or cancel each other's jobs, a viewer cannot
submit, every Submit, Cancel and ClearHost is audited, and the identities file is reloaded without a restart. A
real executor service over a real redis-server; the jobs stay queued (no worker is needed to check who sees what)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tunefleet.v1 import progress_pb2

from clients.errors import NotFound, PermissionDenied, ResourceExhausted, Unauthenticated
from clients.executor_client import ExecutorClient
from common.identity import Identities, token_sha256
from devtools.tiny import make_plan
from executor.service.scoping import fleet_id
from tests.integration.fleet_helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
PEOPLE = {  # principal: (team, role)
    "alice": ("vision", "submitter"), "dora": ("vision", "submitter"), "vic": ("vision", "viewer"),
    "bob": ("speech", "submitter"), "root": ("ops", "admin"),
}


def _token(principal: str) -> str:
    return f"{principal}-s3cret-token"


def _write(path: Path, principals: list[str]) -> Path:
    path.write_text("".join(
        f'[[identity]]\nprincipal = "{p}"\nteam = "{PEOPLE[p][0]}"\nrole = "{PEOPLE[p][1]}"\n'
        f'token_sha256 = "{token_sha256(_token(p))}"\n\n' for p in principals))
    return path


def _plan(tiny_model: Path, data: Path, job_id: str):  # noqa: ANN202 - a Plan
    return make_plan(tiny_model, data, Path(job_id), plan_id=job_id)


def _tunefleet(address: str, principal: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launch", *args, "--executor", address, "--token",
                           _token(principal)], capture_output=True, text=True, timeout=60)


def test_teams_see_and_cancel_only_their_own_jobs_and_every_action_is_audited(start_service, tiny_model,
                                                                            counting_data, tmp_path):
    identities = Identities.from_file(_write(tmp_path / "identities.toml", list(PEOPLE)))
    service = start_service(identities=identities)
    clients = {p: ExecutorClient(service.address, token=_token(p), timeout_s=30) for p in PEOPLE}
    try:
        job = clients["alice"].submit(_plan(tiny_model, counting_data, "vision-1")).job
        assert (job.team, job.submitter) == ("vision", "alice")

        # another team: the job does not exist for it, whatever it asks
        for call in (lambda c: c.get("vision-1"), lambda c: c.cancel("vision-1"),
                     lambda c: next(iter(c.watch("vision-1")))):
            with pytest.raises(NotFound) as hidden:
                call(clients["bob"])
            assert "no job 'vision-1'" in str(hidden.value)
        assert [j.job_id for j in clients["bob"].jobs()] == []
        assert clients["bob"].fleet().pending == [], "another team's waiting job is not named"

        # the same team's viewer sees it, and may neither submit nor cancel
        assert clients["vic"].get("vision-1").submitter == "alice"
        assert [j.job_id for j in clients["vic"].jobs()] == ["vision-1"]
        assert [p.job_id for p in clients["vic"].fleet().pending] == ["vision-1"]
        for call in (lambda c: c.submit(_plan(tiny_model, counting_data, "vic-1")),
                     lambda c: c.cancel("vision-1")):
            with pytest.raises(PermissionDenied) as denied:
                call(clients["vic"])
            assert "needs the submitter role" in str(denied.value) and "vic (team vision) is a viewer" in \
                str(denied.value)
        shown = _tunefleet(service.address, "vic", "submit", str(tmp_path / "nothing.json"))
        assert shown.returncode == 2, "a missing plan file is the caller's mistake before any call"

        # a teammate may cancel it; an admin sees every team's job
        assert clients["bob"].submit(_plan(tiny_model, counting_data, "speech-1")).job.job_id == "speech-1"
        assert clients["dora"].cancel("vision-1").phase == progress_pb2.PHASE_CANCELLED
        speech_1, vision_1 = fleet_id("speech-1", "speech"), fleet_id("vision-1", "vision")
        assert sorted(j.job_id for j in clients["root"].jobs()) == [speech_1, vision_1], "an admin sees fleet ids"
        assert clients["root"].cancel(speech_1, reason="maintenance").phase == progress_pb2.PHASE_CANCELLED

        audit = [(e.principal, e.team, e.action, e.target) for e in clients["root"].audit()]
        assert [a for a in audit if not a[2].startswith("denied:")] == [
            ("alice", "vision", "submit", vision_1), ("bob", "speech", "submit", speech_1),
            ("dora", "vision", "cancel", vision_1), ("root", "ops", "cancel", speech_1)]
        assert [a for a in audit if a[2].startswith("denied:")] == [
            ("vic", "vision", "denied:submit", "vic-1"), ("vic", "vision", "denied:cancel", "vision-1")], \
            "each refused attempt is audited too (issue 50 item 3); bob's 'vision-1' names no job of speech's"
        table = _tunefleet(service.address, "root", "audit")
        assert table.returncode == 0 and "maintenance" in table.stdout and "dora" in table.stdout, table.stderr
        refused = _tunefleet(service.address, "alice", "audit")
        assert refused.returncode == 6 and "Audit needs the admin role" in refused.stderr, refused.stderr
        with pytest.raises(PermissionDenied):
            clients["bob"].clear_host("host-a")
    finally:
        for client in clients.values():
            client.close()


def test_a_team_has_a_cap_on_jobs_waiting_shared_by_its_members(start_service, tiny_model, counting_data, tmp_path):
    identities = Identities.from_file(_write(tmp_path / "identities.toml", list(PEOPLE)))
    service = start_service(identities=identities, max_queued_per_team=2)
    with ExecutorClient(service.address, token=_token("alice"), timeout_s=30) as alice, \
            ExecutorClient(service.address, token=_token("dora"), timeout_s=30) as dora, \
            ExecutorClient(service.address, token=_token("bob"), timeout_s=30) as bob:
        alice.submit(_plan(tiny_model, counting_data, "a-1"))
        dora.submit(_plan(tiny_model, counting_data, "d-1"))
        with pytest.raises(ResourceExhausted) as full:
            dora.submit(_plan(tiny_model, counting_data, "d-2"))
        assert "team vision already has 2 jobs waiting" in str(full.value) and "--max-queued-per-team" in \
            str(full.value)
        assert bob.submit(_plan(tiny_model, counting_data, "b-1")).created, "another team's cap is its own"


def test_the_identities_file_is_read_again_when_it_changes(start_service, tmp_path):
    path = _write(tmp_path / "identities.toml", ["root"])
    service = start_service(identities=Identities.from_file(path))
    with ExecutorClient(service.address, token=_token("bob"), timeout_s=30) as bob:
        with pytest.raises(Unauthenticated):
            bob.fleet()
        _write(path, ["root", "bob"])
        wait_for(lambda: _answers(bob), "bob's token to be accepted after the file changed", timeout_s=30)
        _write(path, ["root"])
        wait_for(lambda: not _answers(bob), "bob's token to be refused once he is removed", timeout_s=30)


def _answers(client: ExecutorClient) -> bool:
    try:
        client.fleet()
    except Unauthenticated:
        return False
    return True

"""Issue 58 item 5, a Submit + Cancel loop: Submits are rate-limited per caller and per team, a team's stored records
are capped, and finished records are deleted after the retention (the ledger and audit keep theirs), so the loop
cannot grow Redis without bound. A real executor service (its own sweep) over a real redis-server."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.errors import NotFound, QuotaExceeded
from clients.executor_client import ExecutorClient
from common.identity import Identities
from executor.service.scoping import fleet_id
from fleet.connection import connect
from fleet.keys import TEAM_BYTES, team_records_key
from fleet.retention import RECORD_OVERHEAD_BYTES, Quotas
from tests.integration.fleet_helpers import fleet_plan, identities, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
FAR = 10**7  # a rate window of about four months: no window ends during the test


def _auth(tmp_path: Path) -> Identities:
    return identities(tmp_path / "auth.toml",
                      [("alice", "nlp", "submitter"), ("dora", "nlp", "submitter"), ("root", "ops", "admin")])


def test_submits_are_rate_limited_per_caller_and_per_team(start_service, tiny_model, counting_data, tmp_path):
    quotas = Quotas(submits_per_minute_per_caller=3, submits_per_minute_per_team=5, rate_window_s=FAR)
    service = start_service(identities=_auth(tmp_path), quotas=quotas)
    with ExecutorClient(service.address, token="alice-token", timeout_s=30) as alice, \
            ExecutorClient(service.address, token="dora-token", timeout_s=30) as dora, \
            ExecutorClient(service.address, token="root-token", timeout_s=30) as root:
        for k in range(3):
            alice.submit(fleet_plan(tiny_model, counting_data, f"a-{k}"))
        with pytest.raises(QuotaExceeded) as caller_full:
            alice.submit(fleet_plan(tiny_model, counting_data, "a-3"))
        assert "principal alice has submitted 3 jobs in" in str(caller_full.value) and "retry in" in str(
            caller_full.value)
        dora.submit(fleet_plan(tiny_model, counting_data, "d-0"))
        dora.submit(fleet_plan(tiny_model, counting_data, "d-1"))
        with pytest.raises(QuotaExceeded) as team_full:
            dora.submit(fleet_plan(tiny_model, counting_data, "d-2"))
        assert "team nlp has submitted 5 jobs in" in str(team_full.value)
        root.submit(fleet_plan(tiny_model, counting_data, "ops-0"))  # the fleet's admins are not limited
        assert [j.job_id for j in root.jobs()] == ["ops-0", *(fleet_id(j, "nlp") for j in ("d-1", "d-0", "a-2", "a-1",
                                                                                          "a-0"))]


def test_a_submit_cancel_loop_is_capped_and_finished_records_expire(start_service, redis_url, tiny_model,
                                                                    counting_data, tmp_path):
    fleet = connect(redis_url)
    quotas = Quotas(max_records_per_team=4, retention_s=3600)
    service = start_service(identities=_auth(tmp_path), quotas=quotas)
    with ExecutorClient(service.address, token="alice-token", timeout_s=30) as alice, \
            ExecutorClient(service.address, token="root-token", timeout_s=30) as root:
        plans = [fleet_plan(tiny_model, counting_data, f"loop-{k}") for k in range(5)]
        for plan in plans[:4]:
            alice.submit(plan)
            alice.cancel(plan.plan_id)
        with pytest.raises(QuotaExceeded) as full:
            alice.submit(plans[4])
        assert "team nlp has 4 job records stored" in str(full.value) and "deleted 0.0416667 days" in str(full.value)
        stored = int(fleet.hget(TEAM_BYTES, "nlp"))
        assert stored == sum(p.ByteSize() + RECORD_OVERHEAD_BYTES for p in plans[:4])
        audited = [(e.action, e.target) for e in root.audit()]

    quick = start_service(identities=_auth(tmp_path), quotas=Quotas(max_records_per_team=4, retention_s=1),
                          sweep_interval_s=0.2)  # the same fleet, a one-second retention
    with ExecutorClient(quick.address, token="alice-token", timeout_s=30) as alice, \
            ExecutorClient(quick.address, token="root-token", timeout_s=30) as root:
        wait_for(lambda: fleet.hlen(team_records_key("nlp")) == 0, "the finished records to expire", 30)
        assert int(fleet.hget(TEAM_BYTES, "nlp")) == 0
        with pytest.raises(NotFound):
            alice.get("loop-0")
        assert list(alice.jobs()) == []
        assert [(e.action, e.target) for e in root.audit()][:len(audited)] == audited, "the audit keeps them"
        assert alice.submit(plans[4]).created, "room again once the records expired"

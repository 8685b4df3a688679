"""Issue 24, fair sharing across teams: a real executor service with an identities file, a real redis-server and a
real worker process. Team vision used the class recently (its decayed usage is charged as a finished hold would
be), so team speech's job starts first though vision queued two before it; vision's own jobs keep their FIFO
order; Fleet and Get show every pending job's position in that same order before the worker starts."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from tunefleet.v1 import progress_pb2

from clients.executor_client import ExecutorClient
from common.identity import Identities, token_sha256
from devtools.tiny import make_plan
from executor.service.scoping import fleet_id
from fleet.fairshare import FairShare, charge_usage
from tests.integration.fleet_helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
PEOPLE = {"alice": ("vision", "submitter"), "bob": ("speech", "submitter"), "root": ("ops", "admin")}


def _token(principal: str) -> str:
    return f"{principal}-fair-token"


def test_a_team_that_used_the_class_recently_waits_behind_one_that_did_not(start_service, start_worker, redis_url,
                                                                          tiny_model, counting_data, tmp_path):
    ids = tmp_path / "identities.toml"
    ids.write_text("".join(f'[[identity]]\nprincipal = "{p}"\nteam = "{t}"\nrole = "{r}"\n'
                           f'token_sha256 = "{token_sha256(_token(p))}"\n\n' for p, (t, r) in PEOPLE.items())
                   + '[[team]]\nname = "vision"\nweight = 1.0\n\n[[team]]\nname = "speech"\nweight = 1.0\n')
    service = start_service(identities=Identities.from_file(ids))
    connection = redis.Redis.from_url(redis_url)
    fair = FairShare(connection)
    pipe = connection.pipeline(transaction=True)
    charge_usage(pipe, "vision", 10_000.0)  # vision held 10,000 GPU-seconds just now
    pipe.execute()
    client = {p: ExecutorClient(service.address, token=_token(p), timeout_s=30) for p in PEOPLE}
    queued = [("alice", "v0"), ("alice", "v1"), ("bob", "s0")]  # FIFO order
    for principal, job_id in queued:
        client[principal].submit(make_plan(tiny_model, counting_data, tmp_path / job_id, plan_id=job_id, max_steps=2))
    # root (an admin of team ops) names the other teams' jobs by their fleet ids (executor.service.scoping)
    expected = [fleet_id("s0", "speech"), fleet_id("v0", "vision"), fleet_id("v1", "vision")]

    wait_for(lambda: fair.weights() == {"vision": 1.0, "speech": 1.0}, "the service to publish the teams' weights")
    pending = {p.job_id: p.position for p in client["root"].fleet().pending}
    assert sorted(pending, key=pending.__getitem__) == expected, pending
    assert client["alice"].get("v0").queue_position == 2 and client["bob"].get("s0").queue_position == 1

    worker = start_worker()
    wait_for(lambda: all(client["root"].get(j).phase == progress_pb2.PHASE_DONE for j in expected[:2]),
             "the first two jobs to finish", 240)
    v1 = client["alice"].cancel("v1")  # still queued: the two starts already told the order
    assert v1.phase == progress_pb2.PHASE_CANCELLED and not v1.HasField("started_at")
    started = sorted((client["root"].get(j).started_at.ToMilliseconds(), j) for j in expected[:2])
    log_tail = Path(worker.log).read_text()[-3000:]
    assert [j for _, j in started] == expected[:2], f"start order {started}; worker log:\n{log_tail}"
    usage = fair.usage()
    assert usage["speech"] > 0 and usage["vision"] > 10_000 * 0.99, "finished holds are charged to their teams"


def test_a_worker_never_starts_a_job_past_its_teams_limit_and_takes_the_next_one(start_service, start_worker,
                                                                                 tiny_model, counting_data, tmp_path):
    ids = tmp_path / "identities.toml"
    ids.write_text("".join(f'[[identity]]\nprincipal = "{p}"\nteam = "{t}"\nrole = "{r}"\n'
                           f'token_sha256 = "{token_sha256(_token(p))}"\n\n' for p, (t, r) in PEOPLE.items())
                   + '[[team]]\nname = "speech"\nquota_gpus = { cpu = 0 }\nborrow_gpus = { cpu = 0 }\n\n'
                   + '[[team]]\nname = "vision"\nquota_gpus = { cpu = 1 }\n')
    service = start_service(identities=Identities.from_file(ids))
    client = {p: ExecutorClient(service.address, token=_token(p), timeout_s=30) for p in PEOPLE}
    for principal, job_id in (("bob", "s0"), ("alice", "v0")):  # speech's job is first in the queue
        client[principal].submit(make_plan(tiny_model, counting_data, tmp_path / job_id, plan_id=job_id, max_steps=2))
    wait_for(lambda: client["bob"].get("s0").pending_reason.startswith("waits for its team's limit: team speech"),
             "the service to publish the quotas")
    start_worker()
    wait_for(lambda: client["alice"].get("v0").phase == progress_pb2.PHASE_DONE, "vision's job to run", 240)
    s0 = client["bob"].get("s0")
    assert s0.phase == progress_pb2.PHASE_QUEUED and not s0.HasField("started_at"), "speech may hold no cpu GPU"
    assert "team speech holds 0 cpu GPU(s), against its quota of 0 plus 0 it may borrow" in s0.pending_reason

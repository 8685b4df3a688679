"""Durable acknowledgements (fleet.durability) against a real redis-server that has no replica: a promise write asked
to wait for one is refused as NotReplicatedError (after the write reached the primary), counted, and each caller keeps
what it must write again; and a hold is charged once however often its charge is made (fleet.ledger)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tunefleet.v1 import executor_pb2, plan_pb2, progress_pb2

from contract.progress import new_event
from devtools.tiny import make_plan
from executor.service.server import connect as connect_executor
from executor.service.server import create_server
from fleet import connection, durability, ledger
from fleet.events import EventLog
from fleet.jobs import NewJob
from fleet.keys import LEDGER_STREAM, job_key
from fleet.leases import Leases
from fleet.lifecycle import Lifecycle
from fleet.queues import QueueRef

WAITING = "?wait_replicas=1&wait_timeout_ms=50"  # a replica asked for, none there: every wait times out


def _new(job_id: str) -> NewJob:
    return NewJob(plan=plan_pb2.Plan(plan_id=job_id), queue=QueueRef("cpu", executor_pb2.PRIORITY_NORMAL), gpus=1,
                  timeout_s=600, events_max_len=100, submitter="alice", team="nlp")


def test_without_a_replica_a_promise_write_reaches_the_primary_and_is_refused(redis_url: str) -> None:
    fleet = connection.connect(redis_url + WAITING)
    before = durability.NOT_REPLICATED.labels("test")._value.get()
    fleet.set("written", 1)
    with pytest.raises(durability.NotReplicatedError, match="0 of 1 replica"):
        durability.confirm(fleet, "test")
    assert durability.NOT_REPLICATED.labels("test")._value.get() == before + 1
    with pytest.raises(durability.NotReplicatedError) as refused:
        durability.pipelined(fleet, "test", lambda pipe: pipe.incr("counter"))
    assert refused.value.replies == [1], "the write's own reply comes with the refusal"
    plain = connection.connect(redis_url)  # waits for nobody: the same calls pass
    durability.confirm(plain, "test")
    assert durability.pipelined(plain, "test", lambda pipe: pipe.incr("counter")) == [2]


def test_an_unconfirmed_claim_raises_with_its_fence_and_unconfirmed_events_stay_to_publish_again(
        redis_url: str) -> None:
    fleet = connection.connect(redis_url + WAITING)
    Lifecycle(connection.connect(redis_url)).submit(_new("job"))
    with pytest.raises(durability.NotReplicatedError) as refused:
        Leases(fleet).claim("job", "host-a", 1, progress_pb2.PHASE_QUEUED, progress_pb2.PHASE_LOADING)
    assert refused.value.replies == [1], "the fence the primary granted"
    events = EventLog(fleet)
    pending = [(new_event("job", 2, progress_pb2.PHASE_LOADING, message="took"), None)]
    assert events.publish_in_order(pending, fence=1) == 0, "not confirmed: still to publish"
    assert EventLog(connection.connect(redis_url)).publish_in_order(pending, fence=1) == 1, \
        "published again: already there, and now it counts"


def test_submit_answers_unavailable_until_a_replica_holds_it_and_a_retry_is_the_same_job(
        redis_url: str, tiny_model: Path, counting_data: Path, tmp_path: Path) -> None:
    from clients.errors import Unavailable
    from clients.executor_client import ExecutorClient

    executor = connect_executor(redis_url + WAITING)
    server, port, health = create_server("127.0.0.1:0", executor)
    server.start()
    try:
        with ExecutorClient(f"127.0.0.1:{port}", timeout_s=10) as client:
            plan = make_plan(tiny_model, counting_data, tmp_path / "out", plan_id="durable")
            with pytest.raises(Unavailable, match="did not confirm the submit on a replica"):
                client.submit(plan)
        assert connection.connect(redis_url).exists(job_key("durable")), "the primary has it: a retry finds it"
    finally:
        server.stop(0)
        executor.close()
    executor = connect_executor(redis_url)
    server, port, health = create_server("127.0.0.1:0", executor)
    server.start()
    try:
        with ExecutorClient(f"127.0.0.1:{port}", timeout_s=10) as client:
            answer = client.submit(plan)
        assert not answer.created and answer.job.job_id == "durable", "the retry answers with the job, not a second"
    finally:
        server.stop(0)
        executor.close()


def test_a_hold_is_charged_once_however_often_its_charge_is_made(redis_url: str) -> None:
    fleet = connection.connect(redis_url)
    Lifecycle(fleet).submit(_new("job"))
    fence = Leases(fleet).claim("job", "host-a", 1_000, progress_pb2.PHASE_QUEUED, progress_pb2.PHASE_LOADING)
    assert fence == 1
    EventLog(fleet).publish(new_event("job", 2, progress_pb2.PHASE_DONE, step=5), fence=1)
    first = ledger.charge_ended(fleet, "job", end_ms=61_000)
    again = ledger.charge_ended(fleet, "job", end_ms=90_000)  # a retry after an unconfirmed charge
    assert first is not None and again is None
    assert fleet.xlen(LEDGER_STREAM) == 1
    assert float(fleet.hget(job_key("job"), "gpu_seconds")) == pytest.approx(first.gpu_seconds)

"""Gang records, member tickets and gang retries against a real redis-server (no training: the holders act
through the same calls the workers make), and the torchrun arguments every node of a gang gets."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from rq.job import Job
from tunefleet.v1 import executor_pb2, progress_pb2

from common.wait import wait_until
from contract.errors import PlanError
from contract.rendezvous import Rendezvous, interface_of
from contract.run_config import run_config_from_plan
from devtools.tiny import make_plan
from executor.service.servicer import Executor
from fleet import connection, queues
from fleet.events import EventLog
from fleet.gangs import FORMING, RUNNING, STOPPING, Gang, queued_job_id, ticket_id
from fleet.jobs import now_ms
from fleet.keys import RETRYING, RUNNING_SET, job_key, lease_key, member_key
from fleet.recovery import GANG_WAIT, FleetPolicy, Sweeper, release_held
from planner.catalog import default_catalog
from tests.executor.worker_steps import dequeue, take

QUEUED, LOADING = progress_pb2.PHASE_QUEUED, progress_pb2.PHASE_LOADING
# Short enough that the lost member shows within the wait, long enough that the member that keeps renewing is never
# taken for lost by a poll delayed on a loaded machine (0.3 s was: host-b lost too, under a parallel suite)
SHORT_TTL_S = 1.0


@pytest.fixture()
def fleet(redis_url: str) -> redis.Redis:
    return connection.connect(redis_url)


def _formed(fleet: redis.Redis, fence: int = 3, nodes: int = 3, ttl_s: float = 30.0) -> Gang:
    gang = Gang(fleet, "job-g", fence, ttl_s)
    gang.form(nodes, "host-a", "10.0.0.1:29500", marker="m")
    return gang


def test_members_join_once_per_rank_only_while_the_gang_of_their_ticket_forms(fleet):
    gang = _formed(fleet)
    view = gang.view()
    assert view is not None and view.state == FORMING and view.members == {0: "host-a"} and not view.complete
    assert gang.join(1, "host-b", 8)
    assert not gang.join(1, "host-c", 8), "a rank is taken once"
    assert not Gang(fleet, "job-g", 2).join(2, "host-c", 8), "a ticket of an earlier attempt is stale"
    assert gang.join(2, "host-c", 4)
    view = gang.view()
    assert view is not None and view.complete and view.members == {0: "host-a", 1: "host-b", 2: "host-c"}
    assert view.gpus == {1: 8, 2: 4} and view.run_id == "job-g-3"
    assert gang.set_state(RUNNING)
    assert not gang.join(3, "host-d", 8), "a running gang takes nobody"
    assert Gang(fleet, "job-g", 2).view() is None, "another attempt's fence reads nothing"


def test_a_member_that_stops_renewing_is_lost_and_a_dropped_gang_ends_every_member(fleet):
    gang = _formed(fleet, nodes=3, ttl_s=SHORT_TTL_S)
    assert gang.join(1, "host-b", 1) and gang.join(2, "host-c", 1)
    view = gang.view()
    assert view is not None and gang.lost(view) == []

    def only_c_lost() -> bool:
        gang.renew(1, "host-b")  # host-b keeps renewing, host-c does not
        gang.keep()
        return gang.lost(view) == [2]
    assert wait_until(only_c_lost, timeout_s=10)

    gang.report_end(1, 1)
    gang.ask_to_stop(1, "host host-b is shutting down")
    view = gang.view()
    assert view is not None and view.ended[1].exit_code == 1 and view.draining == {1: "host host-b is shutting down"}
    gang.drop()
    assert gang.view() is None and not fleet.exists(member_key("job-g", 1))
    assert not gang.renew(1, "host-b") and not gang.set_state(STOPPING), "nothing writes into a dropped gang"


def test_an_untaken_member_ticket_is_withdrawn_a_taken_one_is_left_alone(fleet):
    job_queues = queues.JobQueues(fleet)
    queue = queues.QueueRef("cpu", executor_pb2.PRIORITY_NORMAL).name
    job_queues.enqueue("other-job", queue, 60)
    first, second = ticket_id("job-g", 3, 1), ticket_id("job-g", 3, 2)
    job_queues.enqueue_member(first, "job-g", 3, 1, queue, 60)
    job_queues.enqueue_member(second, "job-g", 3, 2, queue, 60)
    assert job_queues.queued_ids(queue)[:2] == [second, first], \
        "member tickets go to the front of the job's queue"
    dequeue(fleet, second, queue)  # a worker took this one
    assert job_queues.withdraw(first, queue) and not Job.exists(first, connection=fleet)
    assert not job_queues.withdraw(second, queue) and Job.exists(second, connection=fleet)
    assert job_queues.queued_ids(queue) == ["other-job"]
    assert [queued_job_id(e) for e in (first, "other-job", "a--gang-b")] == ["job-g", "other-job", "a--gang-b"]


def _claimed(fleet: redis.Redis, tiny_model: Path, data: Path, nodes: int = 2) -> tuple[Executor, int]:
    executor = Executor(fleet, default_catalog())
    plan = make_plan(tiny_model, data, Path("/mnt/fleet/job-g"), plan_id="job-g", nodes=nodes)
    executor.submit(executor_pb2.SubmitRequest(plan=plan))
    return executor, take(fleet, "job-g", "host-a")


def test_a_gang_that_did_not_form_waits_a_growing_backoff_without_counting_a_failure(fleet, tiny_model,
                                                                                    counting_data):
    FleetPolicy(retry_backoff_s=10).save(fleet)
    executor, fence = _claimed(fleet, tiny_model, counting_data)
    try:
        waits = []
        for attempt in (1, 2):
            before = now_ms()
            assert release_held(fleet, "job-g", fence, "its gang did not form within 120 s", infra_failure=False)
            record = fleet.hgetall(job_key("job-g"))
            assert int(record[b"phase"]) == QUEUED and int(record.get(b"infra_failures", 0)) == 0
            assert record[b"retry_kind"].decode() == GANG_WAIT and int(record[b"gang_attempts"]) == attempt
            assert not fleet.sismember(RUNNING_SET, "job-g") and not fleet.exists(lease_key("job-g"))
            waits.append((int(fleet.zscore(RETRYING, "job-g")) - before) / 1000)
            pending = {p.job_id: p.reason for p in executor.fleet(executor_pb2.FleetRequest()).pending}
            assert pending["job-g"].startswith("its gang did not form within 120 s; its gang tries to form again in")
            assert not release_held(fleet, "job-g", fence - 1, "stale", infra_failure=False), "a stale holder"
            assert Sweeper(fleet).sweep(now=now_ms() + 3_600_000).requeued == ["job-g"]
            claimed = take(fleet, "job-g", "host-a")
            fence = claimed
        assert 10 <= waits[0] <= 15.5 and 20 <= waits[1] <= 30.5, f"doubling, jittered up to +50 %: {waits}"
        messages = [e.message for e in EventLog(fleet).read_after("job-g", 0, 100) if e.phase == QUEUED]
        assert "s, first in its queue" in messages[1] and "the gang tries again in 1" in messages[1]
    finally:
        executor.close()


def test_a_lost_gang_member_counts_as_an_infrastructure_failure(fleet, tiny_model, counting_data):
    FleetPolicy(retry_limit=1, retry_backoff_s=5).save(fleet)
    executor, fence = _claimed(fleet, tiny_model, counting_data)
    try:
        assert release_held(fleet, "job-g", fence, "node 1 (host host-b) of the gang was lost", infra_failure=True)
        record = fleet.hgetall(job_key("job-g"))
        assert int(record[b"infra_failures"]) == 1 and record[b"retry_kind"] == b""
        last = EventLog(fleet).read_after("job-g", 0, 100)[-1]
        assert last.phase == QUEUED and "retry 1 of 1 in 5 s" in last.message
    finally:
        executor.close()


def test_the_plan_spans_nodes_times_gpus_per_node_ranks_up_to_the_gang_limit(tiny_model, counting_data):
    plan = make_plan(tiny_model, counting_data, Path("/mnt/fleet/job-g"), nodes=2, ranks=2)
    cfg = run_config_from_plan(plan)
    assert (cfg.nodes, cfg.world_size, cfg.ranks_per_node) == (2, 4, 2)
    assert cfg.deepspeed_config["train_batch_size"] == 4 * cfg.training.micro_batch_size
    plan.hardware.nodes = 65
    with pytest.raises(PlanError, match="at most 64 hosts") as refused:
        run_config_from_plan(plan)
    assert refused.value.field == "hardware.nodes"


def test_every_node_gets_the_leaders_store_its_own_rank_and_a_pinned_interface():
    node = Rendezvous(nodes=2, node_rank=1, endpoint="127.0.0.1:29511", run_id="job-g-3", local_address="127.0.0.1")
    assert node.torchrun_arguments() == ["--nnodes=2", "--node-rank=1", "--rdzv-backend=static",
                                         "--master-addr=127.0.0.1", "--master-port=29511", "--rdzv-id=job-g-3",
                                         "--local-addr=127.0.0.1"]
    assert node.environment() == {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}
    assert interface_of("192.0.2.55") == "", "an address no interface holds pins nothing"
    assert Rendezvous.from_arguments(_parsed(node.arguments())) == node


def _parsed(arguments: list[str]):  # type: ignore[no-untyped-def]
    import argparse

    parser = argparse.ArgumentParser()
    Rendezvous.add_arguments(parser)
    return parser.parse_args(arguments)

"""Issue 9, items 6 and 7: capacity, cancellation, shutdown and auth of the shared server plumbing, on real gRPC
servers (in-process, and `tunefleet serve planner` processes for signals)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import REGISTRY
from tunefleet.v1 import (
    executor_pb2,
    executor_pb2_grpc,
    model_pb2,
    planner_pb2,
    planner_pb2_grpc,
    progress_pb2,
    training_pb2,
)

from common.auth import Sampled
from common.errors import AbandonedError
from common.identity import Identities
from common.rpc import RESERVED_WORKERS, UNARY_WORKERS, ServerOptions, shutdown
from common.wait import wait_until
from devtools.tiny import make_plan
from executor.service.server import connect
from executor.service.server import create_server as create_executor_server
from executor.service.servicer import ExecutorConfig
from planner.catalog import default_catalog
from planner.server import create_server
from planner.service import Planner
from tests.integration.conftest import serve_process

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
CALL_S = 30.0


def _recommend() -> planner_pb2.RecommendRequest:
    return planner_pb2.RecommendRequest(model=model_pb2.ModelRef(catalog_name="Qwen/Qwen2.5-0.5B"),
                                        workload=training_pb2.WorkloadSpec(dataset_tokens=1_000_000))


class GatedPlanner(Planner):
    """The real planner, whose Recommend waits at a gate the test opens (so that calls are in flight on demand)
    and records how each call ended inside the server."""

    def __init__(self) -> None:
        super().__init__(default_catalog())
        self.gate = threading.Event()
        self.entered = threading.Semaphore(0)
        self.ended: list[str] = []

    def recommend(self, request: planner_pb2.RecommendRequest,
                  should_stop: Callable[[], bool] = lambda: False) -> planner_pb2.RecommendResponse:
        self.entered.release()
        self.gate.wait(CALL_S)
        try:
            answer = super().recommend(request, should_stop)
        except AbandonedError:
            self.ended.append("abandoned")
            raise
        self.ended.append("answered")
        return answer


@pytest.fixture()
def gated() -> Iterator[tuple[GatedPlanner, planner_pb2_grpc.PlannerServiceStub, grpc.Channel]]:
    planner = GatedPlanner()
    # Threads: RESERVED_WORKERS for cheap calls, then one computing and one waiting expensive call.
    options = ServerOptions(max_workers=RESERVED_WORKERS + 2, compute_slots=1)
    server, port, health_servicer = create_server("127.0.0.1:0", options=options, planner=planner)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield planner, planner_pb2_grpc.PlannerServiceStub(channel), channel
    planner.gate.set()
    channel.close()
    shutdown(server, health_servicer, 1.0)


def test_expensive_calls_beyond_capacity_are_refused_at_once_and_health_still_answers(gated) -> None:
    planner, stub, channel = gated
    with ThreadPoolExecutor(2) as pool:
        first: Future[planner_pb2.RecommendResponse] = pool.submit(stub.Recommend, _recommend(), timeout=CALL_S)
        assert planner.entered.acquire(timeout=CALL_S)  # computing: holds the only compute slot
        second = pool.submit(stub.Recommend, _recommend(), timeout=CALL_S)  # admitted, waits for the slot
        wait_until(lambda: _expensive("waiting") == 1, CALL_S)  # the second call waits for the compute slot
        with pytest.raises(grpc.RpcError) as info:
            stub.Recommend(_recommend(), timeout=CALL_S)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "retry with backoff" in info.value.details()
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        assert stub.ListModels(planner_pb2.ListModelsRequest(), timeout=5).models
        planner.gate.set()
        assert first.result(CALL_S).candidates and second.result(CALL_S).candidates
    assert planner.ended == ["answered", "answered"]


def _expensive(state: str) -> float:
    return REGISTRY.get_sample_value("tunefleet_rpc_expensive_calls", {"pool": "search", "state": state}) or 0.0


def test_a_call_whose_deadline_passed_stops_computing(gated) -> None:
    planner, stub, _ = gated
    with pytest.raises(grpc.RpcError) as info:
        stub.Recommend(_recommend(), timeout=0.5)  # waits at the gate past its deadline
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    planner.gate.set()
    wait_until(lambda: planner.ended, CALL_S)  # the abandoned call ends in the server
    assert planner.ended == ["abandoned"]  # the search saw its caller gone and stopped before any work


def _health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status


def test_sigterm_reports_not_serving_while_still_serving_then_a_second_signal_exits(tmp_path: Path) -> None:
    proc, address = serve_process("planner", "--drain-delay-s", "60")
    try:
        assert _health(address) == health_pb2.HealthCheckResponse.SERVING
        proc.send_signal(signal.SIGTERM)
        wait_until(lambda: _health(address) == health_pb2.HealthCheckResponse.NOT_SERVING, CALL_S)
        with grpc.insecure_channel(address) as channel:  # load balancers still route here for a moment: answer
            assert planner_pb2_grpc.PlannerServiceStub(channel).ListModels(planner_pb2.ListModelsRequest(),
                                                                           timeout=5).models
        proc.send_signal(signal.SIGTERM)  # an operator who will not wait 60 s
        assert proc.wait(timeout=CALL_S) == 1
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigterm_drains_and_exits_within_the_delay_and_grace(tmp_path: Path) -> None:
    proc, address = serve_process("planner", "--drain-delay-s", "0.5")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=CALL_S) == 0
    with pytest.raises(grpc.RpcError) as info:
        _health(address)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_an_empty_token_file_refuses_to_start(tmp_path: Path) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    proc = subprocess.run([sys.executable, "-m", "planner", "--address", "127.0.0.1:0", "--token-file", str(empty)],
                          capture_output=True, text=True, timeout=CALL_S)
    assert proc.returncode == 2 and "is empty" in proc.stderr and "Traceback" not in proc.stderr
    missing = subprocess.run([sys.executable, "-m", "planner", "--token-file", str(tmp_path / "none")],
                             capture_output=True, text=True, timeout=CALL_S)
    assert missing.returncode == 2 and "No such file" in missing.stderr
    with pytest.raises(ValueError):
        Identities.single_admin("")


def test_denied_calls_are_logged_at_most_once_per_interval_with_their_count() -> None:
    sampled = Sampled(interval_s=3600)
    counts = [sampled.due() for _ in range(50)]
    assert counts[0] == 1 and counts[1:] == [0] * 49
    every = Sampled(interval_s=0)
    assert [every.due() for _ in range(3)] == [1, 1, 1]


def test_watch_streams_beyond_the_servers_share_are_refused_and_unary_calls_still_answer(redis_url: str,
                                                                                          tmp_path: Path) -> None:
    """Each Watch holds a server thread for its life: without a cap, enough of them starve every other call."""
    executor = connect(redis_url, ExecutorConfig(heartbeat_interval_s=0.2))
    server, port, health_servicer = create_executor_server(
        "127.0.0.1:0", executor, ServerOptions(max_workers=RESERVED_WORKERS + UNARY_WORKERS + 2))
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = executor_pb2_grpc.ExecutorServiceStub(channel)
    plan = make_plan(tmp_path / "m", tmp_path / "d.jsonl", Path("watched"), plan_id="watched")
    stub.Submit(executor_pb2.SubmitRequest(plan=plan), timeout=CALL_S)  # no worker: it stays queued
    watches = [stub.Watch(executor_pb2.WatchRequest(job_id="watched"), timeout=CALL_S) for _ in range(2)]
    try:
        for w in watches:
            next(w)  # each stream is open and holds its thread
        with pytest.raises(grpc.RpcError) as info:
            next(stub.Watch(executor_pb2.WatchRequest(job_id="watched"), timeout=CALL_S))
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "streams are open" in info.value.details()
        assert stub.Get(executor_pb2.GetRequest(job_id="watched"), timeout=5).job.phase == progress_pb2.PHASE_QUEUED
        watches.pop().cancel()
        wait_until(lambda: REGISTRY.get_sample_value("tunefleet_rpc_open_streams") == 1, CALL_S)
        assert next(stub.Watch(executor_pb2.WatchRequest(job_id="watched"), timeout=CALL_S)).HasField("event")
    finally:
        for w in watches:
            w.cancel()
        channel.close()
        shutdown(server, health_servicer, 1.0)
        executor.close()


def _refused_total(method: str) -> float:
    return REGISTRY.get_sample_value("tunefleet_rpc_total",
                                     {"method": method, "code": "RESOURCE_EXHAUSTED"}) or 0.0


def test_every_call_refused_for_capacity_is_counted_in_the_metrics() -> None:
    """Issue 23, item 11: gRPC's own concurrency limit refused calls that the metrics never saw (client 72,
    metrics 40); the interceptor now refuses first, counted."""
    planner = GatedPlanner()
    options = ServerOptions(max_workers=RESERVED_WORKERS + 8, max_concurrent_rpcs=3, compute_slots=1)
    server, port, health_servicer = create_server("127.0.0.1:0", options=options, planner=planner)
    server.start()
    method = "/tunefleet.v1.PlannerService/Recommend"
    before = _refused_total(method)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = planner_pb2_grpc.PlannerServiceStub(channel)
            with ThreadPoolExecutor(12) as pool:
                calls = [pool.submit(stub.Recommend, _recommend(), timeout=CALL_S) for _ in range(12)]
                assert planner.entered.acquire(timeout=CALL_S)
                wait_until(lambda: sum(c.done() for c in calls) >= 9, CALL_S)  # 12 - the 3 let in
                planner.gate.set()
                outcomes = [c.exception().code() if c.exception() else grpc.StatusCode.OK for c in calls]
        exhausted = outcomes.count(grpc.StatusCode.RESOURCE_EXHAUSTED)
        assert exhausted >= 9 and outcomes.count(grpc.StatusCode.OK) + exhausted == 12, outcomes
        assert _refused_total(method) - before == exhausted
    finally:
        planner.gate.set()
        shutdown(server, health_servicer, 1.0)

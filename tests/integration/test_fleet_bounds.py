"""Issue 23, items 2, 7 and 8, on a real executor service over a real redis-server (no worker, no training): what a
caller can store is bounded, a Watch of a finished job ends, server threads are given back, and a service whose
Redis is gone says so at once."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tunefleet.v1 import executor_pb2, executor_pb2_grpc, plan_pb2, progress_pb2

from clients.executor_client import ExecutorClient
from common.wait import wait_until
from contract.limits import MAX_STORED_PLAN_BYTES
from devtools.local_redis import start_redis_server, stop_redis_server
from devtools.tiny import make_plan
from fleet.jobs import SUMMARY_FIELDS, JobStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
CALL_S = 10.0


def _plan(tiny_model: Path, data: Path, plan_id: str) -> plan_pb2.Plan:
    return make_plan(tiny_model, data, Path(plan_id), plan_id=plan_id)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _code(call) -> grpc.RpcError:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def test_what_one_caller_can_store_is_bounded(start_service, redis_url, tiny_model, counting_data):
    service = start_service(max_queued_per_caller=3)
    channel = grpc.insecure_channel(service.address)
    stub = executor_pb2_grpc.ExecutorServiceStub(channel)
    big = _plan(tiny_model, counting_data, "big")
    big.prediction.fit.notes.extend(["n" * 4000] * 200)  # every field inside its own bounds, 800 KB in all
    error = _code(lambda: stub.Submit(executor_pb2.SubmitRequest(plan=big), timeout=CALL_S))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and f"{MAX_STORED_PLAN_BYTES:,}" in error.details()

    # a field this version does not know (number 900, 200 KB) is dropped, never stored
    known = _plan(tiny_model, counting_data, "unknown-fields")
    unknown = _varint(900 << 3 | 2) + _varint(200_000) + b"x" * 200_000
    raw = executor_pb2.SubmitRequest(plan=known).SerializeToString()
    request = b"\x0a" + _varint(len(known.SerializeToString()) + len(unknown)) + known.SerializeToString() + unknown
    assert request.startswith(raw[:1])
    submit_raw = channel.unary_unary("/tunefleet.v1.ExecutorService/Submit",
                                     response_deserializer=executor_pb2.SubmitResponse.FromString)
    submit_raw(request, timeout=CALL_S)
    with ExecutorClient(service.address) as client:
        stored = client.get("unknown-fields").plan
        assert stored.SerializeToString() == known.SerializeToString()

        # a caller may keep 3 jobs waiting (this one has 1); the 4th is refused until one leaves the queue
        for job_id in ("q-2", "q-3"):
            client.submit(_plan(tiny_model, counting_data, job_id))
        error = _code(lambda: stub.Submit(executor_pb2.SubmitRequest(plan=_plan(tiny_model, counting_data, "q-4")),
                                          timeout=CALL_S))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "3 jobs waiting" in error.details() and "--max-queued-per-caller" in error.details()
        client.cancel("q-2")
        client.submit(_plan(tiny_model, counting_data, "q-4"))

    # List and Fleet read what they show, never the stored plan
    store = JobStore(service.executor.connection)
    (record,) = store.read(["q-3"], SUMMARY_FIELDS)
    assert record is not None and record.plan == b"" and record.phase == progress_pb2.PHASE_QUEUED
    assert store.read(["no-such-job"], SUMMARY_FIELDS) == [None]
    channel.close()


def test_a_watch_of_a_finished_job_from_its_end_ends_with_its_state(executor_service, tiny_model, counting_data):
    with ExecutorClient(executor_service.address) as client:
        client.submit(_plan(tiny_model, counting_data, "done-watch"))
        client.cancel("done-watch", "ended for the test")
        last = client.get("done-watch").last_event
        assert last.phase == progress_pb2.PHASE_CANCELLED
    with grpc.insecure_channel(executor_service.address) as channel:
        stub = executor_pb2_grpc.ExecutorServiceStub(channel)
        for after in (last.sequence, last.sequence + 1, 2 ** 63, 2 ** 64 - 1):
            responses = list(stub.Watch(executor_pb2.WatchRequest(job_id="done-watch", after_sequence=after),
                                        timeout=CALL_S))  # a stream that did not end would hit the deadline
            assert [r.event.phase for r in responses] == [progress_pb2.PHASE_CANCELLED], after


def test_threads_a_burst_of_streams_started_are_given_back(start_service, tiny_model, counting_data):
    service = start_service(thread_idle_s=1.0)
    with ExecutorClient(service.address) as client:
        client.submit(_plan(tiny_model, counting_data, "watched"))
    channel = grpc.insecure_channel(service.address)
    stub = executor_pb2_grpc.ExecutorServiceStub(channel)
    before = threading.active_count()
    streams = [stub.Watch(executor_pb2.WatchRequest(job_id="watched"), timeout=60) for _ in range(120)]
    first = [next(s) for s in streams]  # each stream is open on a server thread
    assert len(first) == 120
    during = threading.active_count()
    assert during >= before + 100, (before, during)
    for s in streams:
        s.cancel()
    wait_until(lambda: threading.active_count() <= before + 10, 60)
    channel.close()


@pytest.fixture()
def own_redis(tmp_path: Path) -> Iterator[list]:  # type: ignore[type-arg]
    """[process, url] of a redis-server of the test's own; asked for before start_service, so it outlives it."""
    proc, url = start_redis_server(tmp_path)
    server = [proc, url]
    yield server
    stop_redis_server(server[0])


def test_a_service_whose_redis_is_gone_says_not_serving_and_answers_at_once(own_redis, start_service, tmp_path):
    service = start_service(url=own_redis[1])
    channel = grpc.insecure_channel(service.address)
    health = health_pb2_grpc.HealthStub(channel)

    def status() -> int:
        return health.Check(health_pb2.HealthCheckRequest(service=""), timeout=CALL_S).status

    assert status() == health_pb2.HealthCheckResponse.SERVING
    stop_redis_server(own_redis[0])
    wait_until(lambda: status() == health_pb2.HealthCheckResponse.NOT_SERVING, 15)
    stub = executor_pb2_grpc.ExecutorServiceStub(channel)
    start = time.monotonic()
    error = _code(lambda: stub.Get(executor_pb2.GetRequest(job_id="any"), timeout=CALL_S))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert time.monotonic() - start < 2.0
    own_redis[0], _ = start_redis_server(tmp_path, port=int(own_redis[1].split(":")[2].split("/")[0]))
    wait_until(lambda: status() == health_pb2.HealthCheckResponse.SERVING, 15)
    channel.close()


def test_watch_json_prints_one_response_a_line(executor_service, tiny_model, counting_data):
    """Issue 23, item 11: `watch --json` printed pretty-printed JSON over many lines."""
    with ExecutorClient(executor_service.address) as client:
        client.submit(_plan(tiny_model, counting_data, "jsonl-watch"))
        client.cancel("jsonl-watch")
    proc = subprocess.run([sys.executable, "-m", "launch", "watch", "jsonl-watch", "--json", "--executor",
                           executor_service.address], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 5, proc.stderr  # cancelled
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and [json.loads(line)["event"]["phase"] for line in lines] == [
        "PHASE_QUEUED", "PHASE_CANCELLED"], proc.stdout

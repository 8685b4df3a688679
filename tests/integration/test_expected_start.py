"""Issue 24, "when will it start": Get and Fleet give each queued job an expected start with its range, replaying
its class's hosts and the jobs ahead of it with their predicted durations. A real executor service over a real
redis-server; the hosts are registered through fleet.hosts exactly as a worker registers its own (no worker runs,
so the jobs stay queued and the replay is the only thing that moves them)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tunefleet.v1 import executor_pb2

from clients.executor_client import ExecutorClient
from devtools.tiny import make_plan
from fleet.connection import connect
from fleet.hosts import HostGpus, HostRegistry

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
MINUTE = 60.0


def _plan(tiny_model: Path, data: Path, job_id: str, minutes: float | None):  # noqa: ANN202 - a Plan
    plan = make_plan(tiny_model, data, Path(job_id), plan_id=job_id)
    if minutes is not None:
        e = plan.prediction.estimate
        seconds = minutes * MINUTE
        e.duration_s, e.duration_s_low, e.duration_s_high = seconds, 0.5 * seconds, 2 * seconds
    return plan


def _in_s(stamp: object, now_s: float) -> float:
    return stamp.ToMilliseconds() / 1000 - now_s  # type: ignore[attr-defined]


def test_a_queued_job_is_told_when_it_should_start(start_service, redis_url, tiny_model, counting_data, tmp_path):
    service = start_service()
    registry = HostRegistry(connect(redis_url))
    for host in ("host-a", "host-b"):  # two idle cpu hosts on shared storage
        registry.heartbeat(host, HostGpus("cpu", 0, 0), "", [], tmp_path, work_dir_shared=True)
    with ExecutorClient(service.address, timeout_s=30) as client:
        for job_id, minutes in (("ten", 10), ("twenty", 20), ("thirty", 30)):
            client.submit(_plan(tiny_model, counting_data, job_id, minutes))
        client.submit(_plan(tiny_model, counting_data, "urgent", 5), priority=executor_pb2.PRIORITY_HIGH)
        now_s = time.time()
        pending = {p.job_id: p for p in client.fleet().pending}
        # the high tier goes first; two hosts take "urgent" and "ten" now; "twenty" waits for urgent's 5 min, and
        # "thirty" for ten's 10 min (the earlier of the two hosts to free after that)
        assert [p.job_id for p in client.fleet().pending] == ["urgent", "ten", "twenty", "thirty"]
        expected = {"urgent": (0, 0, 0), "ten": (0, 0, 0), "twenty": (5, 2.5, 10), "thirty": (10, 5, 20)}
        for job_id, (mid, low, high) in expected.items():
            p = pending[job_id]
            got = [_in_s(s, now_s) / MINUTE for s in (p.expected_start, p.expected_start_earliest,
                                                          p.expected_start_latest)]
            assert got == pytest.approx([mid, low, high], abs=0.1), job_id
            assert not p.expected_start_is_lower_bound
        job = client.get("thirty")
        assert _in_s(job.expected_start, time.time()) / MINUTE == pytest.approx(10, abs=0.1)

        client.submit(_plan(tiny_model, counting_data, "unknown", None), priority=executor_pb2.PRIORITY_HIGH)
        client.submit(_plan(tiny_model, counting_data, "after-unknown", 1))
        late = client.get("after-unknown")
        assert late.expected_start_is_lower_bound, "a job ahead has no predicted duration"
        shown = {p.job_id: p for p in client.fleet().pending}
        assert not shown["unknown"].expected_start_is_lower_bound
        assert shown["after-unknown"].expected_start_is_lower_bound

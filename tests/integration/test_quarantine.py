"""Issue 28, item 4: a sick GPU host stops taking work, its running job checkpoints and is requeued, the fleet says
why, and an admin's clear lets the host work again.

There is no GPU here: the NVML readings are injected at the one function that reads them
(executor.worker.gpu_health.source, replaced by devtools.injected_gpu_health with readings from a file the test
writes). Everything after it — the judgement, the quarantine in Redis, the worker's paused claim loop, the
checkpoint and requeue of the running job, ClearHost — is the product's own, over a real worker, service and Redis.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from tunefleet.v1 import progress_pb2

from clients.executor_client import ExecutorClient
from common import exit_status
from devtools.injected_gpu_health import write_readings
from tests.integration.fleet_helpers import assert_once_in_order, events_at_end, fleet_plan, wait_for, watch_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
HEALTHY = ({"index": 0}, {"index": 1})


def _tunefleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launch", *args], capture_output=True, text=True, timeout=60)


def test_a_gpu_that_falls_off_the_bus_quarantines_its_host_until_an_admin_clears_it(
        start_service, start_worker, tiny_model, counting_data, tmp_path):
    readings = tmp_path / "nvml.json"
    write_readings(readings, *HEALTHY)
    service = start_service()
    start_worker("host-a", entry=("-m", "devtools.injected_gpu_health", str(readings)))
    total = 600
    with ExecutorClient(service.address, timeout_s=60) as client:
        wait_for(lambda: client.fleet().hosts, "the worker to register")
        client.submit(fleet_plan(tiny_model, counting_data, "on-a-sick-host", max_steps=total, checkpoint_every=50))
        seen = watch_until(client, "on-a-sick-host", lambda e: e.phase == progress_pb2.PHASE_TRAINING and e.step >= 5)
        write_readings(readings, {"index": 0, "xids": [79]}, {"index": 1, "ecc_uncorrected": 2})
        seen += watch_until(client, "on-a-sick-host", lambda e: e.phase == progress_pb2.PHASE_QUEUED,
                            after=seen[-1].sequence)
        requeued = seen[-1]
        assert requeued.phase == progress_pb2.PHASE_QUEUED, requeued.message
        assert requeued.message.startswith("host host-a is quarantined (GPU 0: XID 79 (GPU has fallen off the bus); "
                                           "GPU 1: 2 uncorrectable (double-bit) ECC error(s))"), requeued.message
        sealed = [e.step for e in seen if e.phase == progress_pb2.PHASE_CHECKPOINTING and "complete" in e.message]
        stopped_at = sealed[-1]  # the checkpoint the ranks wrote when told to stop
        assert 5 <= stopped_at < total

        host = client.fleet().hosts[0]
        assert "XID 79" in host.quarantine_reason and host.HasField("quarantined_at")
        # the host takes nothing while quarantined: the job waits, and the fleet says why
        pending = wait_for(lambda: client.fleet().pending, "the job to wait in its queue")
        assert pending[0].job_id == "on-a-sick-host" and "every cpu host is quarantined" in pending[0].reason
        assert client.get("on-a-sick-host").phase == progress_pb2.PHASE_QUEUED
        shown = _tunefleet("fleet", "--executor", service.address)
        assert shown.returncode == 0 and "QUARANTINED since" in shown.stdout and \
            "tunefleet host clear host-a" in shown.stdout, shown.stdout

        write_readings(readings, *HEALTHY)  # repaired (a GPU reset): the counters the host now has are its normal
        cleared = _tunefleet("host", "clear", "host-a", "--executor", service.address)
        assert cleared.returncode == 0 and "XID 79" in cleared.stdout, cleared.stderr
        again = _tunefleet("host", "clear", "host-a", "--executor", service.address)
        assert again.returncode == exit_status.NOT_FOUND, again.stderr
        assert "host 'host-a' is not quarantined" in again.stderr, again.stderr

        events = events_at_end(client, "on-a-sick-host")
        assert not [h.host_id for h in client.fleet().hosts if h.quarantine_reason]
    assert events[-1].phase == progress_pb2.PHASE_DONE and events[-1].step == total, events[-1].message
    resumed = [int(m.group(1)) for e in events if (m := re.search(r"resumed from .* at step (\d+)", e.message))]
    assert resumed == [stopped_at], "the job checkpointed when its host was quarantined and resumed from there"
    assert_once_in_order(events)

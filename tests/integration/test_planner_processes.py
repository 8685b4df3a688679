"""`tunefleet serve planner --workers N`: N server processes behind one port, one /metrics endpoint for all of
them, a dead worker replaced, and every worker drained on SIGTERM (issue 26)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request

import grpc
import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tunefleet.v1 import hardware_pb2, model_pb2, planner_pb2, planner_pb2_grpc, training_pb2

from common import exit_status
from common.processes import available_cpus
from common.wait import wait_until

pytestmark = pytest.mark.integration
START_S = 60.0
FIT = planner_pb2.FitRequest(model=model_pb2.ModelRef(catalog_name="Qwen/Qwen2.5-0.5B"),
                             training=training_pb2.TrainingSpec(method=training_pb2.METHOD_LORA),
                             hardware=hardware_pb2.HardwareSpec(gpu="l4-24gb"))


def _serve(*args: str) -> tuple[subprocess.Popen[str], dict[str, int]]:
    proc = subprocess.Popen([sys.executable, "-m", "planner", "--address", "127.0.0.1:0", "--metrics-address",
                             "127.0.0.1:0", "--health-address", "127.0.0.1:0", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert proc.stdout is not None
    for line in proc.stdout:
        if '"event": "planner.serving"' in line:
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, json.loads(line)
    raise AssertionError(f"the planner exited {proc.wait()} before serving")


def _workers(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    """The live worker processes (not the multiprocessing resource tracker, not a dead one not yet reaped)."""
    found = []
    for child in psutil.Process(proc.pid).children():
        try:
            if "spawn_main" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.Error:
            continue
    return found


def _listening(pid: int, port: int) -> bool:
    return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port
               for c in psutil.Process(pid).net_connections(kind="tcp"))


def _metric(port: int, name: str, labels: str = "") -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found = re.search(rf"^{name}{re.escape(labels)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _fit_on_new_connections(port: int, n: int) -> None:
    for _ in range(n):  # a channel of its own each: a new connection, which the kernel may give any worker
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
            assert planner_pb2_grpc.PlannerServiceStub(ch).Fit(FIT, timeout=30).result.fits


def test_workers_share_one_port_and_one_metrics_endpoint_and_a_dead_worker_is_replaced() -> None:
    proc, serving = _serve("--workers", "2", "--drain-delay-s", "0")
    port, metrics_port = serving["port"], serving["metrics_port"]
    try:
        assert serving["workers"] == 2
        first = _workers(proc)
        assert len(first) == 2 and all(_listening(w.pid, port) for w in first), "both workers listen on the port"
        _fit_on_new_connections(port, 12)
        fits = '{code="OK",method="/tunefleet.v1.PlannerService/Fit"}'
        assert _metric(metrics_port, "tunefleet_rpc_total", fits) == 12, "one endpoint counts every worker's calls"
        assert _metric(metrics_port, "tunefleet_serving_processes") == 2

        first[0].kill()
        wait_until(lambda: len(_workers(proc)) == 2 and first[0].pid not in {w.pid for w in _workers(proc)}
                   and all(_listening(w.pid, port) for w in _workers(proc)), START_S)
        wait_until(lambda: _metric(metrics_port, "tunefleet_serving_processes") == 2, START_S)
        _fit_on_new_connections(port, 4)
        assert _metric(metrics_port, "tunefleet_rpc_total", fits) >= 16 - 6, "the dead worker's count may go"
        with grpc.insecure_channel(f"127.0.0.1:{serving['health_port']}") as ch:
            assert health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status == \
                health_pb2.HealthCheckResponse.SERVING

        workers = _workers(proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=START_S) == 0
        assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_taken_port_fails_to_start_instead_of_sharing_it() -> None:
    proc, serving = _serve("--workers", "1", "--drain-delay-s", "0")
    try:
        second = subprocess.run([sys.executable, "-m", "planner", "--workers", "1", "--address",
                                 f"127.0.0.1:{serving['port']}"], capture_output=True, text=True, timeout=START_S)
        assert second.returncode == exit_status.UNAVAILABLE and "could not bind" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        proc.kill()
        proc.wait()


def test_the_default_worker_count_is_the_cpus_this_process_may_use() -> None:
    assert 1 <= available_cpus() <= len(os.sched_getaffinity(0))
    help_text = subprocess.run([sys.executable, "-m", "planner", "--help"], capture_output=True, text=True,
                               timeout=START_S).stdout
    assert f"(default {available_cpus()}:" in " ".join(help_text.split())

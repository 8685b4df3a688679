"""A fleet on this machine for the benchmarks: its own redis-server, an executor service on loopback and real
`tunefleet worker` processes sharing one work dir."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
from google.protobuf import timestamp_pb2
from tunefleet.v1 import progress_pb2

from clients.executor_client import ExecutorClient
from common.rpc import shutdown
from devtools.local_redis import start_redis_server, stop_redis_server
from executor.service.server import connect, create_server
from executor.service.servicer import ExecutorConfig
from fleet.recovery import FleetPolicy


def seconds(ts: timestamp_pb2.Timestamp) -> float:
    return float(ts.ToNanoseconds()) / 1e9


class Fleet:
    """An executor service and workers over one private Redis."""

    def __init__(self, work: Path, policy: FleetPolicy, data_root: Path | None = None) -> None:
        self.work = work
        self.data_root = data_root or work  # where the benchmark's model and dataset lie
        (work / "shared").mkdir(parents=True)
        self.redis_proc, self.url = start_redis_server(work)
        self.executor = connect(self.url, ExecutorConfig(policy=policy))
        self.server, port, self.health = create_server("127.0.0.1:0", self.executor)
        self.server.start()
        self.address = f"127.0.0.1:{port}"
        self.workers: dict[str, subprocess.Popen[bytes]] = {}

    def start_worker(self, host_id: str, *extra: str) -> None:
        self.workers[host_id] = subprocess.Popen(
            [sys.executable, "-m", "launch", "worker", "--redis", self.url, "--gpu-class", "cpu", "--host-id",
             host_id, "--work-dir", str(self.work / "shared"), "--work-dir-shared", "--data-root", str(self.data_root),
             "--progress-interval-s", "0", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def kill_host(self, host_id: str) -> None:
        root = psutil.Process(self.workers.pop(host_id).pid)
        for p in [root, *root.children(recursive=True)]:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                continue
        root.wait(30)

    def close(self) -> None:
        for proc in self.workers.values():
            proc.terminate()
        for proc in self.workers.values():
            proc.wait(timeout=120)
        shutdown(self.server, self.health, 1.0)
        self.executor.close()
        stop_redis_server(self.redis_proc)


def events_until(client: ExecutorClient, job_id: str, stop: Callable[[progress_pb2.ProgressEvent], bool],
                 after: int = 0) -> list[progress_pb2.ProgressEvent]:
    seen = []
    for r in client.watch(job_id, after_sequence=after):
        if r.HasField("event"):
            seen.append(r.event)
            if stop(r.event) or r.event.phase in (progress_pb2.PHASE_DONE, progress_pb2.PHASE_FAILED,
                                                 progress_pb2.PHASE_CANCELLED):
                return seen
    return seen

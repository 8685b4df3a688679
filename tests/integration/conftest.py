"""Fleet fixtures: a real executor service on loopback over the test's own Redis, and real worker processes."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from common.identity import Identities
from common.rpc import ServerOptions, shutdown
from common.threads import DEFAULT_IDLE_S
from executor.service.server import DEFAULT_WORKERS, MAX_CONCURRENT_RPCS, connect, create_server
from executor.service.servicer import Executor, ExecutorConfig

HEARTBEAT_S = 0.5


def serve_process(module: str, *args: str) -> tuple[subprocess.Popen[str], str]:
    """`python -m <module> --address 127.0.0.1:0 ARGS` (planner or executor.service) and the address it serves on,
    read from its JSON '<service>.serving' log line; its output keeps draining into nowhere."""
    proc = subprocess.Popen([sys.executable, "-m", module, "--address", "127.0.0.1:0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert proc.stdout is not None
    for line in proc.stdout:
        found = re.search(rf'"port": (\d+).*"event": "{module.partition(".")[0]}\.serving"', line)
        if found:
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, f"127.0.0.1:{found.group(1)}"
    raise AssertionError(f"python -m {module} exited {proc.wait()} before serving")
WORKER_STOP_S = 90.0
# The test "hosts" share this machine's cores: one thread per rank (what torchrun sets when a node runs several
# ranks) keeps two single-rank nodes from oversubscribing them (a LoRA step of a two-node gang: 425 ms with a
# thread per core and rank, 32 ms with one; make bench-multinode).
RANK_THREADS = "1"


@dataclass
class Service:
    address: str
    executor: Executor


def _start(redis_url: str, config: ExecutorConfig, token: str = "", thread_idle_s: float = DEFAULT_IDLE_S,
           identities: Identities | None = None) -> tuple[Service, Callable[[], None]]:
    executor = connect(redis_url, config)
    server, port, health_servicer = create_server(
        "127.0.0.1:0", executor, ServerOptions(max_workers=DEFAULT_WORKERS, max_concurrent_rpcs=MAX_CONCURRENT_RPCS,
                                               token=token, thread_idle_s=thread_idle_s, identities=identities))
    server.start()

    def stop() -> None:
        shutdown(server, health_servicer, 1.0)
        executor.close()
    return Service(f"127.0.0.1:{port}", executor), stop


@pytest.fixture()
def executor_service(redis_url: str) -> Iterator[Service]:
    service, stop = _start(redis_url, ExecutorConfig(heartbeat_interval_s=HEARTBEAT_S))
    yield service
    stop()


@pytest.fixture()
def start_service(redis_url: str) -> Iterator[Callable[..., Service]]:
    """Start executor services with other settings (ExecutorConfig fields, a bearer token, another Redis)."""
    stops: list[Callable[[], None]] = []

    def start(token: str = "", url: str = "", thread_idle_s: float = DEFAULT_IDLE_S,
              identities: Identities | None = None, **config: Any) -> Service:
        service, stop = _start(url or redis_url, ExecutorConfig(**{"heartbeat_interval_s": HEARTBEAT_S, **config}),
                               token, thread_idle_s, identities)
        stops.append(stop)
        return service
    yield start
    for stop in stops:
        stop()


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    host_id: str
    work_dir: Path
    log: Path

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=WORKER_STOP_S)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)


@pytest.fixture()
def start_worker(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Real `tunefleet worker` processes (class cpu, events every step); stopped with SIGTERM at the end."""
    workers: list[Worker] = []

    def start(host_id: str = "host-a", gpu_class: str = "cpu", shared_dir: Path | None = None, url: str = "",
              extra: tuple[str, ...] = (), wrap: tuple[str, ...] = (),
              entry: tuple[str, ...] = ("-m", "launch")) -> Worker:
        """A worker with its own --work-dir, or with shared_dir as its --work-dir-shared (storage all see); wrap
        prefixes its command (`ip netns exec NS`, which execs it: the process is still the worker); entry is what
        Python runs in place of `tunefleet` (devtools.injected_gpu_health: NVML readings from a file)."""
        work_dir = shared_dir or tmp_path / f"work-{host_id}"
        work_dir.mkdir(exist_ok=True)
        log = tmp_path / f"{host_id}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen([*wrap, sys.executable, *entry, "worker", "--redis", url or redis_url,
                                     "--gpu-class", gpu_class, "--host-id", host_id, "--work-dir", str(work_dir),
                                     "--progress-interval-s", "0", *(["--work-dir-shared"] if shared_dir else []),
                                     *extra], stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                    env=dict(os.environ, OMP_NUM_THREADS=RANK_THREADS))
        worker = Worker(proc, host_id, work_dir, log)
        workers.append(worker)
        return worker
    yield start
    for worker in workers:
        worker.stop()

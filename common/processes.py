"""One server process per core behind one port (SO_REUSEPORT, as gRPC's Python multiprocessing example does): the
kernel spreads connections over the processes, so a CPU-bound service computes on every core instead of one (the
GIL). The parent computes nothing: it reserves the port, starts and supervises the workers, answers the health
port and the one /metrics endpoint for all of them (prometheus-client's multiprocess mode), and drains them all on
SIGTERM."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

import structlog
from grpc_health.v1 import health, health_pb2
from prometheus_client import multiprocess

from common import exit_status
from common.log import configure_logging
from common.metrics import metrics_endpoint
from common.rpc import ServerOptions, health_server
from common.serve import SHUTDOWN_GRACE_S

# prometheus-client reads this in every process that imports it: set before a worker starts.
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
# How long a worker may take to import, bind and start before the service gives up on it.
WORKER_START_S = 60.0
# How often the parent looks whether a worker died (and starts another).
SUPERVISE_INTERVAL_S = 0.5
# Seconds beyond a worker's own drain and grace before the parent kills it.
STOP_MARGIN_S = 5.0
# Workers restarted within one supervise pass are logged; a crash loop is bounded by this pause between starts.
RESTART_PAUSE_S = 1.0


CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"  # cgroup v2: "<quota> <period>" in µs, or "max <period>"


def available_cpus() -> int:
    """CPUs this process may use: its affinity, capped by a cgroup v2 CPU quota (a Kubernetes CPU limit)."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = Path(CGROUP_CPU_MAX).read_text().split()
    except (OSError, ValueError):
        return count
    if quota == "max":
        return count
    return max(1, min(count, -(-int(quota) // int(period))))


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


@contextmanager
def reserved_port(address: str) -> Iterator[int]:
    """A port every worker can bind with SO_REUSEPORT (port 0 picks a free one), held by a socket that never
    listens, so that nothing else takes it while the workers bind. OSError when it is taken."""
    host, port = _split_address(address)
    family = socket.AF_INET6 if ":" in host or host == "" else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        try:
            sock.bind((host or "::", port))
        except OSError as e:
            raise OSError(f"could not bind {address}: {e.strerror}") from e
        yield sock.getsockname()[1]
    finally:
        sock.close()


@dataclass
class _Worker:
    process: BaseProcess
    ready: Connection


WorkerMain = Callable[[str, Connection], int]


def _start(context: multiprocessing.context.SpawnContext, target: WorkerMain, address: str) -> _Worker:
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=target, args=(address, send), daemon=True)
    process.start()
    send.close()
    return _Worker(process, receive)


def _wait_ready(worker: _Worker) -> bool:
    """True once the worker serves; False when it died or did not start in time."""
    try:
        return worker.ready.poll(WORKER_START_S) and worker.ready.recv() == "serving"
    except (EOFError, OSError):
        return False


def serve_processes(name: str, workers: int, target: WorkerMain, address: str, options: ServerOptions,
                    metrics_address: str = "", health_address: str = "", drain_delay_s: float = 0.0) -> int:
    """Run `workers` processes of `target(address, ready)` on one port until SIGTERM/SIGINT. Each worker serves on
    `address` (the reserved port), sends "serving" on `ready` once started, and drains itself on SIGTERM
    (common.serve.run_until_signalled). A worker that dies is replaced. A second signal ends everything at once."""
    configure_logging()
    log = structlog.get_logger(f"tunefleet.{name}")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    metrics_dir = tempfile.mkdtemp(prefix=f"tunefleet-{name}-metrics-")
    os.environ[METRICS_DIR_ENV] = metrics_dir  # inherited by every worker started from here on
    context = multiprocessing.get_context("spawn")  # gRPC must not be forked once it runs
    statuses = health.HealthServicer()
    running: list[_Worker] = []
    try:
        with reserved_port(address) as port, metrics_endpoint(metrics_address, multiprocess_dir=metrics_dir) \
                as metrics_port:
            host, _ = _split_address(address)
            bound = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            running = [_start(context, target, bound) for _ in range(workers)]
            if not all(_wait_ready(w) for w in running):
                log.error(f"{name}.worker_failed_to_start", workers=workers)
                return exit_status.UNAVAILABLE
            probes, probe_port = health_server(health_address, statuses, options) if health_address else (None, 0)
            statuses.set("", health_pb2.HealthCheckResponse.SERVING)
            log.info(f"{name}.serving", port=port, workers=workers, tls=bool(options.tls_cert_chain),
                     auth=options.accepted() is not None, metrics_port=metrics_port or None,
                     health_port=probe_port or None)
            while not stop.wait(SUPERVISE_INTERVAL_S):
                for i, worker in enumerate(running):
                    if not worker.process.is_alive():
                        _mark_dead(worker)
                        log.warning(f"{name}.worker_died", pid=worker.process.pid, exitcode=worker.process.exitcode)
                        stop.wait(RESTART_PAUSE_S)
                        running[i] = _start(context, target, bound)
                        if _wait_ready(running[i]):
                            log.info(f"{name}.worker_restarted", pid=running[i].process.pid)

            def force(signum: int, _frame: object) -> None:
                log.warning(f"{name}.forced_stop", signal=signal.Signals(signum).name)
                for worker in running:
                    if worker.process.pid is not None:
                        with contextlib.suppress(ProcessLookupError):  # it had ended already
                            os.kill(worker.process.pid, signal.SIGKILL)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(exit_status.FAILED)
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, force)
            log.info(f"{name}.draining", workers=len(running), drain_delay_s=drain_delay_s, grace_s=SHUTDOWN_GRACE_S)
            statuses.enter_graceful_shutdown()
            _stop_all(running, drain_delay_s + SHUTDOWN_GRACE_S + STOP_MARGIN_S)
            if probes is not None:
                probes.stop(0)
    except OSError as e:  # the address could not be bound
        log.error(f"{name}.cannot_serve", error=str(e))
        return exit_status.UNAVAILABLE
    finally:
        for worker in running:
            if worker.process.is_alive():
                worker.process.kill()
        shutil.rmtree(metrics_dir, ignore_errors=True)
    log.info(f"{name}.stopped")
    return 0


def _stop_all(running: list[_Worker], timeout_s: float) -> None:
    """SIGTERM every worker (each drains itself), then wait; one still running after `timeout_s` is killed."""
    for worker in running:
        if worker.process.is_alive() and worker.process.pid is not None:
            os.kill(worker.process.pid, signal.SIGTERM)
    for worker in running:
        worker.process.join(timeout_s)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join(STOP_MARGIN_S)
        _mark_dead(worker)


def _mark_dead(worker: _Worker) -> None:
    """A dead worker's live gauges leave the sums (prometheus-client multiprocess mode)."""
    if worker.process.pid is not None and os.environ.get(METRICS_DIR_ENV):
        multiprocess.mark_process_dead(worker.process.pid)

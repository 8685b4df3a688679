"""Planner under load: `tunefleet serve planner` (one process, then one per core) first at its sustained capacity
(a few clients), then overloaded (200 Fit clients; 32 Recommend clients), while a separate process checks health
every 50 ms on the health port.

Clients run in processes of their own (asyncio, a connection each: SO_REUSEPORT spreads connections, not calls)
with the typed clients' retry policy (RESOURCE_EXHAUSTED and UNAVAILABLE retried with backoff), so the errors
column is what a caller would see and the client's own CPU is not the server's. Goals (issue 26): goodput under
overload at least 80 % of sustained capacity, no errors after retries, p99 of answered calls at most 100 ms (Fit);
health p99 under 100 ms."""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from multiprocessing.connection import Connection

import grpc
import psutil
from tunefleet.v1 import hardware_pb2, model_pb2, planner_pb2, planner_pb2_grpc, training_pb2

from benchmarks.common import pct, print_table, write_csv
from clients.connection import RETRY_SERVICE_CONFIG

HEALTH_EVERY_S = 0.05
GOODPUT_GOAL = 0.8
ANSWERED_P99_GOAL_S = 0.1
CALL_TIMEOUT_S = 60.0

FIT = planner_pb2.FitRequest(model=model_pb2.ModelRef(catalog_name="meta-llama/Llama-3.1-8B"),
                             training=training_pb2.TrainingSpec(method=training_pb2.METHOD_QLORA),
                             hardware=hardware_pb2.HardwareSpec(gpu="rtx-4090"))
RECOMMEND = planner_pb2.RecommendRequest(model=FIT.model, training=FIT.training,
                                         workload=training_pb2.WorkloadSpec(dataset_tokens=50_000_000))
REQUESTS = {"Fit": FIT, "Recommend": RECOMMEND}


@dataclass(frozen=True)
class Phase:
    method: str
    clients: int
    processes: int


def _serve(workers: int) -> tuple[subprocess.Popen[str], str, str]:
    proc = subprocess.Popen([sys.executable, "-m", "planner", "--address", "127.0.0.1:0", "--drain-delay-s", "0",
                             "--health-address", "127.0.0.1:0", "--workers", str(workers)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert proc.stdout is not None
    for line in proc.stdout:
        if '"event": "planner.serving"' in line:
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            fields = json.loads(line)
            return proc, f"127.0.0.1:{fields['port']}", f"127.0.0.1:{fields['health_port']}"
    raise SystemExit(f"the planner exited {proc.wait()} before serving")


async def _clients(address: str, method: str, n: int, duration_s: float) -> tuple[list[float], Counter[str]]:
    options = [("grpc.enable_retries", 1), ("grpc.service_config", RETRY_SERVICE_CONFIG),
               ("grpc.use_local_subchannel_pool", 1)]  # a connection of its own per channel
    channels = [grpc.aio.insecure_channel(address, options=options) for _ in range(n)]
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    end = time.monotonic() + duration_s

    async def loop(i: int) -> None:
        call = getattr(planner_pb2_grpc.PlannerServiceStub(channels[i % len(channels)]), method)
        while time.monotonic() < end:
            start = time.perf_counter()
            try:
                await call(REQUESTS[method], timeout=CALL_TIMEOUT_S)
                latencies.append(time.perf_counter() - start)
            except grpc.aio.AioRpcError as e:
                errors[e.code().name] += 1

    await asyncio.gather(*(loop(i) for i in range(n)))
    for channel in channels:
        await channel.close()
    return latencies, errors


def _client_process(address: str, method: str, n: int, duration_s: float, out: Connection) -> None:
    out.send(asyncio.run(_clients(address, method, n, duration_s)))


def _probe_health(address: str, duration_s: float, out: Connection) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    stub = health_pb2_grpc.HealthStub(grpc.insecure_channel(address))
    latencies: list[float] = []
    failures = 0
    end = time.monotonic() + duration_s
    tick = threading.Event()
    while time.monotonic() < end:
        start = time.perf_counter()
        try:
            stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
            latencies.append(time.perf_counter() - start)
        except grpc.RpcError:
            failures += 1
        tick.wait(HEALTH_EVERY_S)
    out.send((latencies, failures))


def _run(target: object, args: tuple[object, ...]) -> tuple[multiprocessing.process.BaseProcess, Connection]:
    receive, send = multiprocessing.get_context("spawn").Pipe(duplex=False)
    proc = multiprocessing.get_context("spawn").Process(target=target, args=(*args, send))
    proc.start()
    return proc, receive


def _phase(address: str, phase: Phase, duration_s: float) -> tuple[list[float], Counter[str]]:
    share = [phase.clients // phase.processes + (i < phase.clients % phase.processes) for i in range(phase.processes)]
    running = [_run(_client_process, (address, phase.method, n, duration_s)) for n in share]
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    for proc, receive in running:
        got, failed = receive.recv()
        latencies += got
        errors += failed
        proc.join(30)
    return latencies, errors


def _ms(samples: list[float], q: float) -> str:
    return f"{pct(samples, q) * 1e3:.1f}" if samples else "-"


PHASES = ((Phase("Fit", 8, 2), Phase("Fit", 200, 2)), (Phase("Recommend", 8, 2), Phase("Recommend", 32, 2)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration-s", type=float, default=10.0, help="seconds per phase (default %(default)s)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, os.cpu_count() or 1],
                        help="server processes to measure (default: 1 and the CPU count)")
    args = parser.parse_args()
    rows: list[list[object]] = []
    mib = 2 ** 20
    for workers in args.workers:
        server, address, health_address = _serve(workers)
        try:
            tree = [psutil.Process(server.pid), *psutil.Process(server.pid).children()]
            stub = planner_pb2_grpc.PlannerServiceStub(grpc.insecure_channel(address))
            stub.Fit(FIT, timeout=CALL_TIMEOUT_S)
            stub.Recommend(RECOMMEND, timeout=CALL_TIMEOUT_S)
            rss_before = sum(p.memory_info().rss for p in tree)
            probe = _run(_probe_health, (health_address, 4 * args.duration_s + 8))
            for capacity, overload in PHASES:
                base, _ = _phase(address, capacity, args.duration_s)
                ok, errors = _phase(address, overload, args.duration_s)
                sustained, goodput = len(base) / args.duration_s, len(ok) / args.duration_s
                for phase, lat, errs, rate in ((capacity, base, Counter(), sustained), (overload, ok, errors, goodput)):
                    rows.append([workers, phase.method, phase.clients, f"{rate:.0f}",
                                 f"{rate / sustained:.0%}" if phase is overload else "capacity",
                                 json.dumps(dict(errs)) if errs else "{}",
                                 _ms(lat, 50), _ms(lat, 99)])
            health, failures = probe[1].recv()
            probe[0].join(30)
            rss_after = sum(p.memory_info().rss for p in tree if p.is_running())
            rows.append([workers, "Health (--health-address)", 1, f"{len(health) / (4 * args.duration_s):.0f}", "",
                         json.dumps({"failed": failures}) if failures else "{}", _ms(health, 50), _ms(health, 99)])
            print(f"workers {workers}: RSS {rss_before / mib:.0f} -> {rss_after / mib:.0f} MiB (all processes)")
        finally:
            server.terminate()
            server.wait(60)
    header = ["workers", "calls", "clients", "ok_per_s", "of_capacity", "errors_after_retries", "p50_ms", "p99_ms"]
    print_table(f"planner under load, {args.duration_s:g} s per phase ({os.cpu_count()} CPUs shared by server and "
                f"clients; goals: overload goodput >= {GOODPUT_GOAL:.0%} of capacity, no errors, Fit p99 <= "
                f"{ANSWERED_P99_GOAL_S * 1e3:.0f} ms)", header, rows)
    print(f"wrote {write_csv('load.csv', header, rows)}")


if __name__ == "__main__":
    main()

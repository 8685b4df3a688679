"""Planner under load: 200 concurrent Fit clients and 32 concurrent Recommend clients against one
`tunefleet serve planner` process (its defaults), while a separate process checks health every 50 ms.

Clients use the typed clients' channel (gRPC retries RESOURCE_EXHAUSTED and UNAVAILABLE with backoff), so the
errors column is what a caller would see. Goal: no errors other than shed load after retries, health p99 under
100 ms, and RSS back within a few MB of where it started."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from multiprocessing.connection import Connection

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tunefleet.v1 import hardware_pb2, model_pb2, planner_pb2, planner_pb2_grpc, training_pb2

from benchmarks.common import pct, print_table, write_csv
from clients.connection import channel_for

FIT_CLIENTS = 200
RECOMMEND_CLIENTS = 32
HEALTH_EVERY_S = 0.05
HEALTH_GOAL_S = 0.1
CALL_TIMEOUT_S = 60.0

FIT = planner_pb2.FitRequest(model=model_pb2.ModelRef(catalog_name="meta-llama/Llama-3.1-8B"),
                             training=training_pb2.TrainingSpec(method=training_pb2.METHOD_QLORA),
                             hardware=hardware_pb2.HardwareSpec(gpu="rtx-4090"))
RECOMMEND = planner_pb2.RecommendRequest(model=FIT.model, training=FIT.training,
                                         workload=training_pb2.WorkloadSpec(dataset_tokens=50_000_000))


def _serve() -> tuple[subprocess.Popen[str], str, str]:
    proc = subprocess.Popen([sys.executable, "-m", "planner", "--address", "127.0.0.1:0", "--drain-delay-s", "0",
                             "--health-address", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert proc.stdout is not None
    for line in proc.stdout:
        if '"event": "planner.serving"' in line:
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            fields = json.loads(line)
            return proc, f"127.0.0.1:{fields['port']}", f"127.0.0.1:{fields['health_port']}"
    raise SystemExit(f"the planner exited {proc.wait()} before serving")


def _probe_health(address: str, stop_after_s: float, out: Connection) -> None:
    """In its own process: Check every HEALTH_EVERY_S; sends back (latencies, failures)."""
    stub = health_pb2_grpc.HealthStub(grpc.insecure_channel(address))
    latencies: list[float] = []
    failures = 0
    end = time.monotonic() + stop_after_s
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


class Clients:
    """n threads calling one method in a loop until told to stop; latencies of successes, codes of failures."""

    def __init__(self, address: str, method: str, request: object, n: int) -> None:
        self.latencies: list[float] = []
        self.errors: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        channel = channel_for(address)
        call = getattr(planner_pb2_grpc.PlannerServiceStub(channel), method)
        self._threads = [threading.Thread(target=self._loop, args=(call, request), daemon=True) for _ in range(n)]

    def _loop(self, call: object, request: object) -> None:
        while not self._stop.is_set():
            start = time.perf_counter()
            try:
                call(request, timeout=CALL_TIMEOUT_S)  # type: ignore[operator]
                with self._lock:
                    self.latencies.append(time.perf_counter() - start)
            except grpc.RpcError as e:
                with self._lock:
                    self.errors[e.code().name] += 1

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(CALL_TIMEOUT_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration-s", type=float, default=20.0)
    args = parser.parse_args()
    server, address, health_address = _serve()
    rows: list[list[object]] = []
    try:
        proc = psutil.Process(server.pid)
        warm = planner_pb2_grpc.PlannerServiceStub(grpc.insecure_channel(address))
        warm.Fit(FIT, timeout=CALL_TIMEOUT_S)
        warm.Recommend(RECOMMEND, timeout=CALL_TIMEOUT_S)
        rss_before = proc.memory_info().rss
        probes = []
        for target in (address, health_address):
            receive, send = multiprocessing.Pipe(duplex=False)
            prober = multiprocessing.get_context("spawn").Process(target=_probe_health,
                                                                  args=(target, args.duration_s + 2, send))
            prober.start()
            probes.append((prober, receive))
        fits = Clients(address, "Fit", FIT, FIT_CLIENTS)
        recommends = Clients(address, "Recommend", RECOMMEND, RECOMMEND_CLIENTS)
        rss_peak = rss_before
        fits.start()
        recommends.start()
        end = time.monotonic() + args.duration_s
        while time.monotonic() < end:
            rss_peak = max(rss_peak, proc.memory_info().rss)
            threading.Event().wait(0.5)
        fits.stop()
        recommends.stop()
        health = [receive.recv() for _, receive in probes]
        for prober, _ in probes:
            prober.join(30)
        rss_after = proc.memory_info().rss
    finally:
        server.terminate()
        server.wait(30)

    mib = 2 ** 20
    for name, clients, n in (("Fit", fits, FIT_CLIENTS), ("Recommend", recommends, RECOMMEND_CLIENTS)):
        ok = clients.latencies
        rows.append([name, n, len(ok), f"{len(ok) / args.duration_s:.0f}", json.dumps(dict(clients.errors)) or "{}",
                     f"{pct(ok, 50) * 1e3:.1f}" if ok else "-", f"{pct(ok, 99) * 1e3:.1f}" if ok else "-",
                     f"{rss_before / mib:.0f}", f"{rss_peak / mib:.0f}", f"{rss_after / mib:.0f}"])
    for name, (h, failures) in zip(("Health, main port", "Health, --health-address"), health, strict=True):
        rows.append([name, 1, len(h), f"{len(h) / args.duration_s:.0f}",
                     json.dumps({"failed": failures}) if failures else "{}",
                     f"{pct(h, 50) * 1e3:.1f}" if h else "-", f"{pct(h, 99) * 1e3:.1f}" if h else "-", "", "", ""])
    header = ["calls", "clients", "ok", "ok_per_s", "errors_after_retries", "p50_ms", "p99_ms", "rss_before_mib",
              "rss_peak_mib", "rss_after_mib"]
    print_table(f"planner under load for {args.duration_s:g} s ({os.cpu_count()} CPUs; health goal p99 < "
                f"{HEALTH_GOAL_S * 1e3:.0f} ms)", header, rows)
    for name, (h, _) in zip(("main port", "--health-address"), health, strict=True):
        print(f"health on the {name}: max {max(h, default=0) * 1e3:.1f} ms; {sum(x > HEALTH_GOAL_S for x in h)} "
              f"of {len(h)} checks over {HEALTH_GOAL_S * 1e3:.0f} ms")
    print(f"wrote {write_csv('load.csv', header, rows)}")


if __name__ == "__main__":
    main()

"""Fleet benchmarks on this machine (own redis-server, executor service, real worker, tiny model on the CPU):

1. Submit-to-first-step latency and its parts, from the job's own event times: queue wait (Submit -> a worker
   takes the job), process start (-> rank 0's first event: launcher and rank imports, plan checks, tokenizing),
   model load + engine (-> preflight step done), with the step itself.
2. Event latency from rank 0's write (EventLog.publish, what rank 0's sink calls) to a Watch client's receipt,
   p50 / p99, with 1 and with 200 concurrent watchers on one executor service (goal: p99 <= 50 ms at 200).
   Watchers run in separate processes (50 threads each), so client-side GIL contention is not measured as
   service latency.
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis
from google.protobuf import timestamp_pb2
from tunefleet.v1 import progress_pb2

from benchmarks.common import pct, print_table, write_csv
from clients.executor_client import ExecutorClient
from common.rpc import shutdown
from devtools.local_redis import start_redis_server, stop_redis_server
from devtools.tiny import build_model, counting_text, make_plan
from executor.service.server import connect, create_server
from executor.service.servicer import ExecutorConfig
from fleet.events import EventLog

WATCHERS_PER_PROCESS = 50
EVENT_INTERVAL_S = 0.05
JOB_WAIT_S = 300.0


def _s(ts: timestamp_pb2.Timestamp) -> float:
    return float(ts.ToNanoseconds()) / 1e9


def submit_to_first_step(address: str, redis_url: str, work: Path, runs: int) -> list[list[object]]:
    model = build_model(work / "model")
    data = counting_text(work / "data.jsonl", records=64)
    worker = subprocess.Popen([sys.executable, "-m", "launch", "worker", "--redis", redis_url, "--gpu-class",
                               "cpu", "--work-dir", str(work / "runs"), "--data-root", str(work),
                               "--progress-interval-s", "0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    rows: list[list[object]] = []
    try:
        with ExecutorClient(address, timeout_s=JOB_WAIT_S) as client:
            for i in range(runs):
                plan = make_plan(model, data, Path(f"bench-{i}"), max_steps=2, plan_id=f"bench-{i}")
                submitted = time.time()
                client.submit(plan)
                events = [r.event for r in client.watch(plan.plan_id) if r.HasField("event")]
                took = next(e for e in events if e.phase == progress_pb2.PHASE_LOADING)
                rank0 = next(e for e in events if e.phase == progress_pb2.PHASE_LOADING and e.sequence > took.sequence)
                first = next(e for e in events if e.phase == progress_pb2.PHASE_PREFLIGHT)
                step_s = float(first.message.split("took ")[1].split(" s")[0])
                rows.append([i + 1, f"{_s(took.time) - submitted:.2f}", f"{_s(rank0.time) - _s(took.time):.2f}",
                             f"{_s(first.time) - _s(rank0.time) - step_s:.2f}", f"{step_s:.2f}",
                             f"{_s(first.time) - submitted:.2f}"])
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    return rows


def _watchers(address: str, job_id: str, count: int, out: Any, ready: Any) -> None:
    latencies: list[float] = []
    lock = threading.Lock()
    started = threading.Barrier(count + 1)

    def watch() -> None:
        client = ExecutorClient(address)
        mine = []
        first = True
        for r in client.watch(job_id):
            if first:
                started.wait()
                first = False
            if r.HasField("event") and r.event.sequence > 1:
                mine.append(time.time() - _s(r.event.time))
        with lock:
            latencies.extend(mine)
    threads = [threading.Thread(target=watch) for _ in range(count)]
    for t in threads:
        t.start()
    started.wait()
    ready.set()
    for t in threads:
        t.join()
    out.put(latencies)


def event_latency(address: str, log: EventLog, watchers: int, events: int, job_id: str) -> list[float]:
    mp = multiprocessing.get_context("spawn")  # gRPC's threads do not survive fork()
    out = mp.Queue()
    procs, readies = [], []
    for n in [WATCHERS_PER_PROCESS] * (watchers // WATCHERS_PER_PROCESS) + (
            [watchers % WATCHERS_PER_PROCESS] if watchers % WATCHERS_PER_PROCESS else []):
        ready = mp.Event()
        p = mp.Process(target=_watchers, args=(address, job_id, n, out, ready))
        p.start()
        procs.append(p)
        readies.append(ready)
    for ready in readies:
        ready.wait(120)
    for seq in range(2, events + 2):
        now = timestamp_pb2.Timestamp()
        now.GetCurrentTime()
        phase = progress_pb2.PHASE_DONE if seq == events + 1 else progress_pb2.PHASE_TRAINING
        log.publish(progress_pb2.ProgressEvent(job_id=job_id, sequence=seq, phase=phase, step=seq, time=now))
        time.sleep(EVENT_INTERVAL_S)  # the publishing rate of a busy run, not a wait on anything
    latencies = [x for _ in procs for x in out.get(timeout=120)]
    for p in procs:
        p.join(60)
    return latencies


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3, help="jobs for submit-to-first-step (default %(default)s)")
    p.add_argument("--events", type=int, default=200, help="events per latency measurement (default %(default)s)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tunefleet-bench-"))
    redis_proc, url = start_redis_server(work)
    executor = connect(url, ExecutorConfig())
    server, port, health = create_server("127.0.0.1:0", executor)
    server.start()
    address = f"127.0.0.1:{port}"
    try:
        header = ["job", "queue wait s", "process start s", "model load + engine s", "first step s", "total s"]
        rows = submit_to_first_step(address, url, work, args.runs)
        print_table("submit to first step (tiny Llama, 1 CPU rank, 2-core machine)", header, rows)
        write_csv("fleet_first_step.csv", header, rows)

        log = EventLog(redis.Redis.from_url(url))
        lat_rows: list[list[object]] = []
        with ExecutorClient(address) as client:
            for watchers in (1, 200):
                plan = make_plan(work / "model", work / "data.jsonl", Path("x"), plan_id=f"latency-{watchers}")
                plan.hardware.gpu = "a100-80gb"  # queued only: this benchmark publishes the events itself
                client.submit(plan)
                lat = event_latency(address, log, watchers, args.events, plan.plan_id)
                lat_rows.append([watchers, len(lat), f"{pct(lat, 50) * 1e3:.2f}", f"{pct(lat, 99) * 1e3:.2f}",
                                 f"{max(lat) * 1e3:.2f}", "yes" if pct(lat, 99) <= 0.050 else "NO"])
        header = ["watchers", "receipts", "p50 ms", "p99 ms", "max ms", "p99 <= 50 ms"]
        print_table("event latency: rank 0's publish -> Watch client receipt (loopback)", header, lat_rows)
        write_csv("fleet_event_latency.csv", header, lat_rows)
    finally:
        shutdown(server, health, 1.0)
        executor.close()
        stop_redis_server(redis_proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Executor reads at fleet scale (issue 23, item 2): 10,000 queued jobs, each plan at the stored-plan size cap,
in a redis-server of the benchmark's own; an executor service process (`python -m executor.service`) answers
Fleet and 500-job List pages. Reports p50 / max latency per call and the service's RSS before, while and after
(goal: each call under 200 ms, RSS under +100 MB, and back down after).

    python -m benchmarks.fleet_reads [--jobs 10000] [--calls 20] [--service-checkout DIR]

--service-checkout runs the service from another checkout (e.g. a `git worktree` of an older commit), so the
same load measures it side by side; the jobs are written by this checkout's code.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from tunefleet.v1 import executor_pb2, plan_pb2

from benchmarks.common import pct, print_table, write_csv
from clients.executor_client import ExecutorClient
from common.net import free_port
from common.wait import wait_until
from contract.limits import MAX_STORED_PLAN_BYTES
from devtools.local_redis import start_redis_server, stop_redis_server
from devtools.tiny import make_plan
from fleet import connection, queues
from fleet.jobs import NewJob
from fleet.lifecycle import Lifecycle

GOAL_MS = 200.0
GOAL_RSS_MB = 100.0
FILL_BATCH = 500


def _plan_at_cap(job_id: str) -> bytes:
    plan = make_plan(Path("/srv/models/tiny"), Path("/srv/data/train.jsonl"), Path(job_id), plan_id=job_id)
    room = MAX_STORED_PLAN_BYTES - plan.ByteSize() - 64
    plan.prediction.fit.notes.extend(["n" * 4000] * (room // 4004))
    plan.prediction.fit.notes.append("n" * max(0, MAX_STORED_PLAN_BYTES - plan.ByteSize() - 8))
    assert plan.ByteSize() <= MAX_STORED_PLAN_BYTES, plan.ByteSize()
    return plan.SerializeToString()


def fill(redis_url: str, jobs: int) -> int:
    """`jobs` queued jobs of class cpu, normal tier, each with a plan at the cap; returns one plan's bytes."""
    lifecycle = Lifecycle(connection.connect(redis_url))
    template = _plan_at_cap("fill-0")
    for i in range(jobs):
        plan = plan_pb2.Plan.FromString(template)
        plan.plan_id = f"fill-{i}"
        lifecycle.submit(NewJob(plan=plan, queue=queues.QueueRef("cpu", executor_pb2.PRIORITY_NORMAL),
                                gpus=1, timeout_s=3600, submitter="bench"))
        if i and i % 2000 == 0:
            print(f"  {i:,} jobs queued", file=sys.stderr)
    return len(template)


def _rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def _timed(fn, calls: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--service-checkout", type=Path, help="run the executor service from this checkout")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tunefleet-reads-") as tmp:
        proc, url = start_redis_server(Path(tmp))
        port = free_port()
        env = dict(os.environ)
        if args.service_checkout:
            root = args.service_checkout.resolve()
            env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "protos"), env.get("PYTHONPATH", "")])
        service = subprocess.Popen([sys.executable, "-m", "executor.service", "--address", f"127.0.0.1:{port}",
                                    "--redis", url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   env=env, cwd=args.service_checkout or None)
        try:
            with ExecutorClient(f"127.0.0.1:{port}", timeout_s=60) as client:
                wait_until(lambda: _answers(client), 30)
                idle_mb = _rss_mb(service.pid)
                started = time.monotonic()
                plan_bytes = fill(url, args.jobs)
                fill_s = time.monotonic() - started
                fleet_ms = _timed(lambda: client.fleet(), args.calls)
                list_ms = _timed(lambda: client.list_jobs(page_size=500), args.calls)
                busy_mb = _rss_mb(service.pid)
                pending = len(client.fleet().pending)
                time.sleep(5)  # a pause with no calls: what the service keeps
                after_mb = _rss_mb(service.pid)
        finally:
            service.terminate()
            service.wait(timeout=30)
            stop_redis_server(proc)
    header = ["call", "jobs queued", "plan bytes", "p50 ms", "max ms", "goal ms", "ok"]
    rows: list[list[object]] = []
    for name, samples in (("Fleet", fleet_ms), ("List (500 jobs)", list_ms)):
        rows.append([name, args.jobs, plan_bytes, f"{statistics.median(samples):.1f}", f"{max(samples):.1f}",
                     GOAL_MS, "yes" if pct(samples, 99) <= GOAL_MS else "NO"])
    print_table(f"Executor reads over {args.jobs:,} queued jobs (filled in {fill_s:.0f} s; Fleet lists "
                f"{pending} pending, as many as it shows)", header, rows)
    rss = [["service RSS MB", f"{idle_mb:.0f}", f"{busy_mb:.0f}", f"{after_mb:.0f}",
            f"{busy_mb - idle_mb:+.0f}", GOAL_RSS_MB, "yes" if busy_mb - idle_mb <= GOAL_RSS_MB else "NO"]]
    print_table("Service memory", ["", "idle", "after the calls", "5 s later", "growth", "goal", "ok"], rss)
    write_csv("fleet_reads.csv", header, rows)
    write_csv("fleet_reads_rss.csv", ["", "idle", "after the calls", "5 s later", "growth", "goal", "ok"], rss)
    return 0


def _answers(client: ExecutorClient) -> bool:
    try:
        client.fleet()
        return True
    except Exception:  # noqa: BLE001 - not up yet
        return False


if __name__ == "__main__":
    raise SystemExit(main())

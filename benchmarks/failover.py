"""`make bench-failover`: the fleet through a Redis failover, on this machine — a primary, two replicas and three
redis-sentinel processes on loopback (append-only files on, Sentinel's down-after-milliseconds 5,000 as deploy/
sets it), a real executor service and two real `tunefleet worker` processes on the Sentinel URL whose runs are
devtools.sim_train (the worker's claim, lease, events and ledger are the real ones).

1. The failover: two long jobs running and jobs queued, a client submitting one job every SUBMIT_EVERY_S; the
   primary is killed (SIGKILL). Measured from the kill: the first Submit answered OK, the first training step
   stored on the new primary; then jobs lost (a Submit answered OK and no job, or a job not DONE; goal 0) and jobs
   run twice (two hosts holding one job at once; goal 0). Goal: service back within 15 s.
2. The cost of durable acknowledgements (fleet.durability), in one run on the same servers: Submit p50/p99 over
   gRPC and events published per second, with wait_replicas=1 and with 0.

Tables to stdout, CSV to benchmarks/results/failover.csv.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog
from tunefleet.v1 import plan_pb2, progress_pb2

from benchmarks.common import pct, print_table, stop_processes, write_csv
from clients.errors import TunefleetError
from clients.executor_client import ExecutorClient
from common.rpc import ServerOptions, shutdown
from common.wait import wait_until
from contract.progress import TERMINAL_PHASES, new_event
from devtools.local_sentinel import SentinelSet, start_sentinel_set
from devtools.sim_train import SCALE_ENV
from devtools.tiny import build_model, counting_text, make_plan
from executor.service.server import connect, create_server
from executor.service.servicer import ExecutorConfig
from fleet import connection
from fleet.events import EventLog
from fleet.jobs import NewJob
from fleet.lifecycle import Lifecycle
from fleet.queues import QueueRef

DOWN_AFTER_MS = 5_000  # Sentinel's down-after-milliseconds here and in deploy/ (its default is 30 s)
BACK_GOAL_S = 15.0
SUBMIT_EVERY_S = 0.2
LONG_S, SHORT_S = 30_000.0, 500.0  # predicted seconds; a simulated run holds its host 1/1000 of that
HEADER = ["measure", "value", "goal"]


def holds(events: list[progress_pb2.ProgressEvent]) -> tuple[list[str], int]:
    """The hosts that took a job, in order, and how many times a host took it while another still held it (a hold
    closes with an event that gives the job back or ends it)."""
    hosts, overlaps, open_hold = [], 0, False
    for e in events:
        if e.phase == progress_pb2.PHASE_LOADING and " took the job" in e.message:
            overlaps += open_hold
            hosts.append(e.message.split()[1])
            open_hold = True
        elif e.phase == progress_pb2.PHASE_QUEUED or e.phase in TERMINAL_PHASES:
            open_hold = False
    return hosts, overlaps


@contextmanager
def fleet(url: str, work: Path) -> Iterator[str]:
    """An executor service in this process and two simulated-run workers, all on `url`; yields the address."""
    executor = connect(url, ExecutorConfig(heartbeat_interval_s=0.5, sweep_interval_s=0.5))
    server, port, health = create_server("127.0.0.1:0", executor, ServerOptions(max_workers=64))
    server.start()
    env = dict(os.environ, **{SCALE_ENV: "0.001"}, OMP_NUM_THREADS="1")
    workers = [subprocess.Popen([sys.executable, "-m", "devtools.sim_worker", "1", "worker", "--redis", url,
                                 "--gpu-class", "cpu", "--host-id", f"host-{i}", "--work-dir", str(work / "shared"),
                                 "--work-dir-shared", "--data-root", str(work), "--progress-interval-s", "0"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
               for i in range(2)]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop_processes(workers)
        shutdown(server, health, 1.0)
        executor.close()


class Submitter:
    """Submits a job every SUBMIT_EVERY_S until stopped, each retried with the same plan until it is answered OK;
    keeps when each was answered OK."""

    def __init__(self, client: ExecutorClient, plan_of: Any) -> None:
        self.client, self.plan_of = client, plan_of
        self.ok_at: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(SUBMIT_EVERY_S):
            job_id = f"arrival-{n:03d}"
            while not self._stop.is_set():
                try:
                    self.client.submit(self.plan_of(job_id, SHORT_S))
                    self.ok_at[job_id] = time.monotonic()
                    break
                except TunefleetError:
                    continue
            n += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)


def failover(sentinels: SentinelSet, work: Path, plan_of: Any, queued: int) -> list[list[object]]:
    with fleet(sentinels.url, work) as address, ExecutorClient(address, timeout_s=30) as client:
        wait_until(lambda: len(client.fleet().hosts) == 2, 120)
        for job_id in ("long-0", "long-1"):
            client.submit(plan_of(job_id, LONG_S))
        wait_until(lambda: all(client.get(j).phase == progress_pb2.PHASE_TRAINING for j in ("long-0", "long-1")), 120)
        for i in range(queued):
            client.submit(plan_of(f"queued-{i:02d}", SHORT_S))
        submitter = Submitter(client, plan_of)
        submitter.start()
        wait_until(lambda: len(submitter.ok_at) >= 3, 60)
        steps_before = {j: client.get(j).last_event.step for j in ("long-0", "long-1")}
        killed_at = time.monotonic()
        sentinels.kill(sentinels.primary())
        stepped_at: float = wait_until(lambda: next((time.monotonic() for j, s in steps_before.items()
                                                      if _step_now(client, j) > s), 0.0), 120)
        wait_until(lambda: any(t > killed_at for t in submitter.ok_at.values()), 120)
        submitted_at = min(t for t in submitter.ok_at.values() if t > killed_at)
        wait_until(lambda: len([t for t in submitter.ok_at.values() if t > killed_at]) >= 5, 120)
        submitter.stop()
        jobs = ["long-0", "long-1", *(f"queued-{i:02d}" for i in range(queued)), *submitter.ok_at]
        wait_until(lambda: all(client.get(j).phase in TERMINAL_PHASES for j in jobs), 600)
        lost = sum(client.get(j).phase != progress_pb2.PHASE_DONE for j in jobs)
        twice = sum(holds(_events(client, j))[1] > 0 for j in jobs)
    back_s = max(submitted_at, stepped_at) - killed_at
    return [["first Submit answered OK after the kill (s)", round(submitted_at - killed_at, 2), f"<= {BACK_GOAL_S:g}"],
            ["first training step stored after the kill (s)", round(stepped_at - killed_at, 2), f"<= {BACK_GOAL_S:g}"],
            ["service back (s)", round(back_s, 2), "met" if back_s <= BACK_GOAL_S else "MISSED"],
            ["jobs (answered OK)", len(jobs), ""],
            ["jobs lost", lost, "0"],
            ["jobs run twice", twice, "0"]]


def _step_now(client: ExecutorClient, job_id: str) -> int:
    try:
        return int(client.get(job_id).last_event.step)
    except TunefleetError:
        return -1


def _events(client: ExecutorClient, job_id: str) -> list[progress_pb2.ProgressEvent]:
    return [r.event for r in client.watch(job_id) if r.HasField("event")]


def durable_cost(sentinels: SentinelSet, plan_of: Any, submits: int, events: int) -> list[list[object]]:
    rows: list[list[object]] = []
    for replicas in (1, 0):
        url = f"{sentinels.url}?wait_replicas={replicas}"
        executor = connect(url, ExecutorConfig())
        server, port, health = create_server("127.0.0.1:0", executor, ServerOptions(max_workers=16))
        server.start()
        try:
            with ExecutorClient(f"127.0.0.1:{port}", timeout_s=30) as client:
                latencies = []
                for i in range(submits):
                    plan = plan_of(f"cost-{replicas}-{i:04d}", SHORT_S)
                    started = time.perf_counter()
                    client.submit(plan)
                    latencies.append((time.perf_counter() - started) * 1000)
        finally:
            shutdown(server, health, 1.0)
            executor.close()
        publisher = EventLog(connection.connect(url))
        job_id = f"events-{replicas}"
        Lifecycle(connection.connect(url)).submit(NewJob(
            plan=plan_pb2.Plan(plan_id=job_id), queue=QueueRef("bench", 2), gpus=1, timeout_s=600,
            events_max_len=events + 10, submitter="bench", team="bench"))
        batch = [(new_event(job_id, 2 + i, progress_pb2.PHASE_TRAINING, step=i), None) for i in range(events)]
        started = time.perf_counter()
        published = sum(publisher.publish_in_order(batch[i:i + 10]) for i in range(0, events, 10))
        rate = published / (time.perf_counter() - started)
        rows.append([replicas, round(pct(latencies, 50), 2), round(pct(latencies, 99), 2), round(rate)])
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.failover", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queued", type=int, default=10, help="jobs queued before the kill (default %(default)s)")
    p.add_argument("--submits", type=int, default=200, help="Submits timed per setting (default %(default)s)")
    p.add_argument("--events", type=int, default=5000, help="events published per setting, 10 per call as a "
                                                            "worker's pump sends a step's (default %(default)s)")
    args = p.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as tmp:
        work = Path(tmp)
        model = build_model(work / "model")
        data = counting_text(work / "data.jsonl", records=64)

        def plan_of(job_id: str, duration_s: float) -> plan_pb2.Plan:
            plan = make_plan(model, data, Path(job_id), plan_id=job_id)
            plan.output_uri = job_id
            e = plan.prediction.estimate
            e.duration_s = e.duration_s_low = e.duration_s_high = duration_s
            return plan

        (work / "redis").mkdir()
        sentinels = start_sentinel_set(work / "redis", replicas=2, down_after_ms=DOWN_AFTER_MS)
        try:
            rows = failover(sentinels, work, plan_of, args.queued)
            print_table(f"Failover: primary killed, Sentinel down-after {DOWN_AFTER_MS:,} ms, primary + 2 replicas, "
                        "2 workers", HEADER, rows)
            write_csv("failover.csv", HEADER, rows)
            # after the failover (the workers have stopped: the jobs this submits stay queued), on the new primary
            # and its remaining replica
            cost = durable_cost(sentinels, plan_of, args.submits, args.events)
        finally:
            sentinels.stop()
    print_table("Durable acknowledgements: Submit over gRPC and events published, one replica waited for or none",
                ["wait_replicas", "Submit p50 ms", "Submit p99 ms", "events/s"], cost)
    write_csv("failover_durable.csv", ["wait_replicas", "submit_p50_ms", "submit_p99_ms", "events_per_s"], cost)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

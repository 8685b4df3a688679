"""Fleet recovery on this machine (own redis-server, executor service, real workers, tiny Llama on the CPU), with
the fleet's default settings (30 s lease, 5 s sweeps, 10 s first retry backoff):

1. A host lost mid-run (its worker, launcher and ranks SIGKILLed at once, as in a power loss), a second worker
   of the class idle: detection (kill -> the job's requeue event), recovery (kill -> the other host takes it),
   back to training (kill -> its first training event after the resume), and the work lost (steps trained
   before the kill that had to be redone: last step reached - step of the checkpoint resumed from), for
   checkpoint intervals of 10 and 40 steps. p50 / max over the runs.
2. Preemption hand-over: a low-priority job running on the only worker, a high-priority job submitted: submit ->
   low's yield checkpoint, -> high starts on the host, -> high's first step; and the low job's work lost
   (it checkpoints when it yields: 0 expected).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from tunefleet.v1 import executor_pb2, plan_pb2, progress_pb2

from benchmarks.common import pct, print_table, write_csv
from benchmarks.local_fleet import Fleet, events_until, seconds
from clients.executor_client import ExecutorClient
from common.wait import wait_until
from devtools.tiny import build_model, counting_text, make_plan
from fleet.recovery import FleetPolicy

WAIT_S = 600.0


def _plan(model: Path, data: Path, job_id: str, steps: int, every: int) -> plan_pb2.Plan:
    plan = make_plan(model, data, Path(job_id), plan_id=job_id, max_steps=steps, checkpoint_every=every)
    plan.output_uri = job_id
    return plan


def lost_host(work: Path, model: Path, data: Path, runs: int) -> list[list[object]]:
    fleet = Fleet(work / "lost", FleetPolicy(), data_root=work)
    rows: list[list[object]] = []
    try:
        fleet.start_worker("host-0")
        fleet.start_worker("host-1")
        spare = 2
        with ExecutorClient(fleet.address, timeout_s=60) as client:
            wait_until(lambda: len(client.fleet().hosts) == 2, WAIT_S)
            for i in range(runs):
                every = 10 if i % 2 == 0 else 40
                job_id = f"lost-{i}"
                client.submit(_plan(model, data, job_id, steps=every * 3 + 40, every=every))
                # kill part-way between two checkpoints, at a different point each run
                kill_step = every + 1 + (i * 7) % every
                before = events_until(client, job_id, lambda e, k=kill_step: e.phase == progress_pb2.PHASE_TRAINING
                                       and e.step >= k)
                holder = client.get(job_id).host_id
                fleet.kill_host(holder)
                killed = time.time()
                fleet.start_worker(f"host-{spare}")  # the replacement joins as the other host recovers the job
                spare += 1
                after = events_until(client, job_id, lambda e: False, after=before[-1].sequence)
                last_step = max(e.step for e in before)
                requeued = next(e for e in after if e.phase == progress_pb2.PHASE_QUEUED)
                taken = next(e for e in after if e.phase == progress_pb2.PHASE_LOADING)
                resumed = next(e for e in after if "resumed from" in e.message)
                training = next(e for e in after if e.phase == progress_pb2.PHASE_PREFLIGHT)
                rows.append([i + 1, every, last_step, resumed.step, last_step - resumed.step,
                             f"{seconds(requeued.time) - killed:.1f}", f"{seconds(taken.time) - killed:.1f}",
                             f"{seconds(training.time) - killed:.1f}", progress_pb2.Phase.Name(after[-1].phase)])
    finally:
        fleet.close()
    return rows


def preemption(work: Path, model: Path, data: Path, runs: int) -> list[list[object]]:
    fleet = Fleet(work / "preempt", FleetPolicy(preemption=True), data_root=work)
    rows: list[list[object]] = []
    try:
        fleet.start_worker("host-0")
        with ExecutorClient(fleet.address, timeout_s=60) as client:
            for i in range(runs):
                low, high = f"low-{i}", f"high-{i}"
                client.submit(_plan(model, data, low, steps=400, every=0), priority=executor_pb2.PRIORITY_LOW)
                before = events_until(client, low, lambda e: e.phase == progress_pb2.PHASE_TRAINING and e.step >= 5)
                submitted = time.time()
                client.submit(_plan(model, data, high, steps=4, every=0), priority=executor_pb2.PRIORITY_HIGH)
                high_events = events_until(client, high, lambda e: e.phase == progress_pb2.PHASE_PREFLIGHT)
                low_events = events_until(client, low, lambda e: False, after=before[-1].sequence)
                events_until(client, high, lambda e: False, after=high_events[-1].sequence)
                yielded = next(e for e in low_events if e.phase == progress_pb2.PHASE_CHECKPOINTING)
                trained = [e.step for e in low_events if e.phase == progress_pb2.PHASE_TRAINING
                           and e.sequence < yielded.sequence] + [before[-1].step]
                resumed = next(e for e in low_events if "resumed from" in e.message)
                taken = next(e for e in high_events if e.phase == progress_pb2.PHASE_LOADING)
                rows.append([i + 1, f"{seconds(yielded.time) - submitted:.1f}",
                             f"{seconds(taken.time) - submitted:.1f}",
                             f"{seconds(high_events[-1].time) - submitted:.1f}", max(trained) - resumed.step,
                             progress_pb2.Phase.Name(low_events[-1].phase)])
    finally:
        fleet.close()
    return rows


def _summary(rows: list[list[object]], columns: list[int]) -> list[object]:
    out: list[object] = []
    for c in columns:
        values = [float(r[c]) for r in rows]  # type: ignore[arg-type]
        out.append(f"{pct(values, 50):.1f} / {max(values):.1f}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5, help="lost-host runs (default %(default)s)")
    p.add_argument("--preemptions", type=int, default=3, help="preemption runs (default %(default)s)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tunefleet-recovery-"))
    try:
        model = build_model(work / "model")
        data = counting_text(work / "data.jsonl", records=64)
        header = ["run", "ckpt every", "last step", "resumed at", "steps redone", "detected s", "taken s",
                  "first step s", "end"]
        rows = lost_host(work, model, data, args.runs)
        rows.append(["p50 / max", "", "", "", *_summary(rows, [4, 5, 6, 7]), ""])
        print_table("host lost (SIGKILL of worker + ranks): seconds after the kill, defaults: 30 s lease, "
                    "10 s first retry backoff", header, rows)
        write_csv("fleet_recovery.csv", header, rows)
        header = ["run", "low yielded s", "high taken s", "high first step s", "low steps redone", "low end"]
        rows = preemption(work, model, data, args.preemptions)
        rows.append(["p50 / max", *_summary(rows, [1, 2, 3, 4]), ""])
        print_table("preemption hand-over: seconds after the high-priority Submit", header, rows)
        write_csv("fleet_preemption.csv", header, rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

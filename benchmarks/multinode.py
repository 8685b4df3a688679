"""Multi-node jobs on this machine (own redis-server, executor service, real workers as "hosts", tiny Llama on
CPU ranks with gloo over loopback):

1. Gang start: two idle workers, a nodes=2 job submitted: Submit -> the leader claims it, the leader asks ->
   the gang is formed (the member took its ticket and joined), Submit -> the first training step done
   (preflight). p50 / max over the runs.
2. Step time, the same plan and world size on one node and on two: 1 node x 1 rank, 1 node x 2 ranks, 2 nodes x
   1 rank, for LoRA (ZeRO-2) and full fine-tuning (ZeRO-3): the run's measured step time (Feedback) and tokens/s.
   On one machine the two "nodes" talk over loopback TCP, so this measures tunefleet's gang overhead, not a
   network; on real hosts the planner's inter-node communication estimate is what the Feedback sets it against.
   Every rank gets one CPU thread (OMP_NUM_THREADS=1, what torchrun sets when a node runs several ranks): the
   two "hosts" share this machine's cores, and two single-rank nodes with a thread per core each would
   oversubscribe them (measured: 425 ms a LoRA step instead of ~40).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from tunefleet.v1 import plan_pb2, progress_pb2, training_pb2

from benchmarks.common import pct, print_table, write_csv
from benchmarks.local_fleet import Fleet, events_until, seconds
from clients.executor_client import ExecutorClient
from common.wait import wait_until
from devtools.tiny import build_model, counting_text, make_plan
from fleet.recovery import FleetPolicy

WAIT_S = 600.0
SHAPES = [(1, 1), (1, 2), (2, 1)]  # (nodes, ranks per node)
METHODS = {"lora zero-2": (training_pb2.METHOD_LORA, 2), "full zero-3": (training_pb2.METHOD_FULL, 3)}


def _plan(model: Path, data: Path, job_id: str, steps: int, nodes: int = 2, ranks: int = 1,
          method: int = training_pb2.METHOD_LORA, zero_stage: int = 2) -> plan_pb2.Plan:
    plan = make_plan(model, data, Path(job_id), plan_id=job_id, max_steps=steps, nodes=nodes, ranks=ranks,
                     method=method, zero_stage=zero_stage)
    plan.output_uri = job_id
    return plan


def gang_start(fleet: Fleet, model: Path, data: Path, runs: int) -> list[list[object]]:
    rows: list[list[object]] = []
    with ExecutorClient(fleet.address, timeout_s=60) as client:
        for i in range(runs):
            job_id = f"gang-start-{i}"
            submitted = seconds(client.submit(_plan(model, data, job_id, steps=4)).job.submitted_at)
            events = events_until(client, job_id, lambda e: False)
            if events[-1].phase != progress_pb2.PHASE_DONE:
                raise SystemExit(f"{job_id} ended {progress_pb2.Phase.Name(events[-1].phase)}: {events[-1].message}")
            forming = next(e for e in events if e.message.startswith("forming a gang"))
            formed = next(e for e in events if e.message.startswith("gang formed"))
            first = next(e for e in events if e.phase == progress_pb2.PHASE_PREFLIGHT)
            rows.append([i + 1, f"{seconds(forming.time) - submitted:.2f}",
                         f"{seconds(formed.time) - seconds(forming.time):.2f}",
                         f"{seconds(first.time) - submitted:.2f}", progress_pb2.Phase.Name(events[-1].phase)])
    return rows


def step_times(fleet: Fleet, model: Path, data: Path, steps: int) -> list[list[object]]:
    rows: list[list[object]] = []
    with ExecutorClient(fleet.address, timeout_s=60) as client:
        for name, (method, zero_stage) in METHODS.items():
            for nodes, ranks in SHAPES:
                job_id = f"steps-{zero_stage}-{nodes}x{ranks}"
                client.submit(_plan(model, data, job_id, steps, nodes, ranks, method, zero_stage))
                events = events_until(client, job_id, lambda e: False)
                if events[-1].phase != progress_pb2.PHASE_DONE:
                    raise SystemExit(f"{job_id} ended {progress_pb2.Phase.Name(events[-1].phase)}: "
                                     f"{events[-1].message}")
                feedback = client.get(job_id).feedback
                rows.append([name, nodes, ranks, nodes * ranks, f"{feedback.measured_step_time_s * 1000:.0f}",
                             f"{feedback.measured_tokens_per_s:.0f}", progress_pb2.Phase.Name(events[-1].phase)])
    return rows


def _p50_max(rows: list[list[object]], columns: list[int]) -> list[str]:
    summaries = []
    for c in columns:
        values = [float(str(r[c])) for r in rows]
        summaries.append(f"{pct(values, 50):.2f} / {max(values):.2f}")
    return summaries


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5, help="gang starts measured (default %(default)s)")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps per step-time run (default %(default)s)")
    args = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the workers and their ranks (see the module's docstring)
    work = Path(tempfile.mkdtemp(prefix="tunefleet-multinode-"))
    fleet = Fleet(work / "fleet", FleetPolicy(), data_root=work)
    try:
        model = build_model(work / "model")
        data = counting_text(work / "data.jsonl", records=256)
        fleet.start_worker("host-0")
        fleet.start_worker("host-1")
        with ExecutorClient(fleet.address, timeout_s=60) as client:
            wait_until(lambda: len(client.fleet().hosts) == 2, WAIT_S)

        header = ["run", "submit -> claimed s", "asked -> gang formed s", "submit -> first step s", "end"]
        rows = gang_start(fleet, model, data, args.runs)
        rows.append(["p50 / max", *_p50_max(rows, [1, 2, 3]), ""])
        print_table("gang start: two idle cpu workers, a nodes=2 LoRA job", header, rows)
        write_csv("multinode_gang_start.csv", header, rows)

        header = ["method", "nodes", "ranks/node", "world", "step ms", "tokens/s", "end"]
        rows = step_times(fleet, model, data, args.steps)
        print_table(f"step time, {args.steps} steps of micro-batch 2 x 32 tokens per rank (tiny Llama, CPU, gloo)",
                    header, rows)
        write_csv("multinode_step_time.csv", header, rows)
    finally:
        fleet.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

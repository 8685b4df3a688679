"""Checkpoints on object storage, on this machine: a real DeepSpeed checkpoint of about 1 GiB (a model of
Linear layers with AdamW's state, ZeRO-0, on the CPU), saved by executor.training.checkpoint.save and handed to
executor.training.remote's background uploads, against an S3 API server on loopback (moto's server, its own
process, as the tests use).

1. Upload and download: one sealed checkpoint put into the store (Store.upload, manifest last) and fetched back
   with every file's SHA-256 and the signature checked (Store.fetch, checkpoint.verify): MiB, seconds, MB/s.
2. The training stall per checkpoint: the local save alone (what a run without a store waits for) against the
   local save plus handing the checkpoint to the uploads (RunStore.submit: hard links and the bounded queue),
   with `--interval-s` of training (a sleep: the GPU's time) between checkpoints, the two in turns. Goal: the
   stall is at most the local save's time + 10 %.

Run with DS_ACCELERATOR=cpu (make bench-storage sets it); --size-mib shrinks the checkpoint.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import boto3
import deepspeed
import structlog
import torch

from benchmarks.common import as_single_rank, print_table, write_csv
from common.net import free_port
from common.units import MiB
from common.wait import wait_until
from contract.store import Store, job_prefix
from executor.training import checkpoint, remote

BYTES_PER_PARAMETER = 12  # fp32 weights and AdamW's two fp32 moments: what a ZeRO-0 checkpoint of this model holds
WIDTH = 2048
STALL_GOAL = 1.10  # the goal: the stall with uploads at most the local save's time + 10 %


def _moto_server() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    os.environ.update(AWS_ENDPOINT_URL=url, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION="us-east-1")
    wait_until(lambda: _answers(url), 60)
    return proc, url


def _answers(url: str) -> bool:
    try:
        boto3.client("s3", endpoint_url=url).list_buckets()
        return True
    except Exception:  # not listening yet
        return False


def _engine(size_mib: int) -> object:
    layers = max(1, size_mib * MiB // (BYTES_PER_PARAMETER * WIDTH * WIDTH))
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(layers)])
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config={
        "train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
        "zero_optimization": {"stage": 0}})
    loss = engine(torch.randn(1, WIDTH)).sum()  # one step, so that AdamW's moments exist
    engine.backward(loss)
    engine.step()
    return engine


def _save(engine: object, root: Path, step: int) -> tuple[Path, float]:
    started = time.perf_counter()
    path = checkpoint.save(engine, root, checkpoint.TrainerState("bench", step, step, 1, 1), 0, keep=2,
                           frozen_excluded=False)
    assert path is not None
    return path, time.perf_counter() - started


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mib", type=int, default=1024, help="the checkpoint's size (default %(default)s)")
    p.add_argument("--checkpoints", type=int, default=3, help="checkpoints in the stall run (default %(default)s)")
    p.add_argument("--interval-s", type=float, default=30.0,
                   help="training between two checkpoints (default %(default)s s)")
    args = p.parse_args()
    if os.environ.get("DS_ACCELERATOR") != "cpu":
        raise SystemExit("run with DS_ACCELERATOR=cpu (make bench-storage sets it)")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    as_single_rank()
    deepspeed.init_distributed(dist_backend="gloo")
    server, url = _moto_server()
    try:
        boto3.client("s3").create_bucket(Bucket="bench")
        with tempfile.TemporaryDirectory() as tmp:
            rows, stalls = _run(Path(tmp), _engine(args.size_mib), args)
    finally:
        server.terminate()
        server.wait()
    header = ["what", "MiB", "seconds", "MB/s"]
    print_table(f"Checkpoint upload and download ({url}: moto's S3 server on loopback; {os.cpu_count()} cores)",
                header, rows)
    print(f"CSV: {write_csv('storage_throughput.csv', header, rows)}")
    stall_header = ["checkpoint", "local save s", "with uploads: stall s", "stall / local save", "goal"]
    print_table(f"Training stall per checkpoint, {args.interval_s:g} s of training between checkpoints",
                stall_header, stalls)
    print(f"CSV: {write_csv('storage_stall.csv', stall_header, stalls)}")


def _run(root: Path, engine: object, args: argparse.Namespace) -> tuple[list[list[object]], list[list[object]]]:
    store = Store(job_prefix("s3://bench/fleet", "throughput"))
    local, _ = _save(engine, root / "one", 1)
    size = _size(local)
    started = time.perf_counter()
    sealed = store.upload(local, 1, 1, lambda: True)
    up_s = time.perf_counter() - started
    assert sealed is not None
    started = time.perf_counter()
    why = store.fetch(sealed, root / "fetched") or checkpoint.verify(root / "fetched", checkpoint.signing_key())
    down_s = time.perf_counter() - started
    assert not why, why
    rows = [["upload (files, then the manifest)", f"{size / MiB:.0f}", f"{up_s:.2f}", f"{size / up_s / 1e6:.0f}"],
            ["download (every file's SHA-256 checked)", f"{size / MiB:.0f}", f"{down_s:.2f}",
             f"{size / down_s / 1e6:.0f}"]]
    shutil.rmtree(root / "fetched")

    local_s, stall_s = [], []
    notices: list[str] = []
    run_store = remote.RunStore(Store(job_prefix("s3://bench/fleet", "stall")), 0, 2, lambda: True,
                                lambda step, notice: notices.append(notice.message))
    run_store.start_uploads()
    _save(engine, root / "warm-up", 1)  # the first save of a process is faster (no earlier write is being flushed)
    time.sleep(args.interval_s)
    for step in range(2, 2 + args.checkpoints):  # in turns, so that both see the same disk and page cache
        local_s.append(_save(engine, root / "local", step)[1])  # a run without a store
        time.sleep(args.interval_s)
        started = time.perf_counter()  # the same run with uploads in the background
        path, _ = _save(engine, root / "stored", step)
        run_store.submit(path, step, 1)
        stall_s.append(time.perf_counter() - started)
        time.sleep(args.interval_s)
    run_store.finish(1 + args.checkpoints)
    stored = [n for n in notices if "stored and sealed" in n]
    assert len(stored) == args.checkpoints, notices
    stalls = [[i + 1, f"{a:.2f}", f"{b:.2f}", f"{b / a:.3f}", f"<= {STALL_GOAL:.2f}"]
              for i, (a, b) in enumerate(zip(local_s, stall_s, strict=True))]
    stalls.append(["median", f"{statistics.median(local_s):.2f}", f"{statistics.median(stall_s):.2f}",
                   f"{statistics.median(stall_s) / statistics.median(local_s):.3f}", f"<= {STALL_GOAL:.2f}"])
    return rows, stalls


if __name__ == "__main__":
    main()

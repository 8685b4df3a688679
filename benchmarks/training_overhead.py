"""Executor training-loop overhead on the CPU: the executor's loop (progress events, ETA, checkpoint
bookkeeping, a progress event every step: the most it ever reports) against a bare DeepSpeed loop (forward,
backward, step) on the same engine and batches, in alternating blocks in one process. Target: overhead <= 3 %.

Checkpoint writes are disk I/O the bare loop does not do; their cost is reported on its own line.
Run with DS_ACCELERATOR=cpu (make bench does).
"""

from __future__ import annotations

import gc
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import deepspeed
import structlog
import torch
import transformers
from tunefleet.v1 import training_pb2

from benchmarks.common import as_single_rank, print_table, write_csv
from contract.progress import JsonlProgressSink
from contract.run_config import parse_plan, run_config_from_plan
from devtools.tiny import build_model, counting_text, make_plan, write_plan
from executor.training import checkpoint
from executor.training.model import detect_host
from executor.training.process import prepare
from executor.training.recipe import Setup, Trainer

WARMUP_STEPS = 3
BLOCKS = 24
STEPS_PER_BLOCK = 5
HIDDEN_SIZE, LAYERS, SEQUENCE_LENGTH, MICRO_BATCH = 256, 4, 128, 4


def _bare(s: Setup, trainer: Trainer, next_g: int, steps: int) -> int:
    """Plain DeepSpeed: forward, backward, step on the same micro-batches, nothing else."""
    for _ in range(steps * trainer.cfg.training.gradient_accumulation_steps):
        b = trainer.batch(s, next_g)
        s.engine.backward(s.engine(**b.tensors).loss)
        s.engine.step()
        next_g += 1
    return next_g


def _paired_blocks(trainer: Trainer) -> tuple[list[float], list[float]]:
    """Seconds per step of the bare loop and the executor's loop, in alternating blocks on one engine, so
    that drift in machine load falls on both alike."""
    s = trainer.setup()
    accumulation = trainer.cfg.training.gradient_accumulation_steps
    step = trainer.loop(s, 0, 0, stop_step=WARMUP_STEPS)
    next_g = step * accumulation
    bare_s, ours_s = [], []
    for block in range(BLOCKS):
        for which in ((0, 1) if block % 2 == 0 else (1, 0)):
            started = time.perf_counter()
            if which == 0:
                next_g = _bare(s, trainer, next_g, STEPS_PER_BLOCK)
                bare_s.append((time.perf_counter() - started) / STEPS_PER_BLOCK)
            else:
                step = trainer.loop(s, step, next_g, stop_step=step + STEPS_PER_BLOCK)
                next_g += STEPS_PER_BLOCK * accumulation
                ours_s.append((time.perf_counter() - started) / STEPS_PER_BLOCK)
    return bare_s, ours_s


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    transformers.utils.logging.disable_progress_bar()
    if os.environ.get("DS_ACCELERATOR") != "cpu":
        raise SystemExit("run with DS_ACCELERATOR=cpu: this benchmark measures the CPU loop (make bench sets it)")
    as_single_rank()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    deepspeed.init_distributed(dist_backend="gloo")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir = build_model(root / "model", hidden_size=HIDDEN_SIZE, layers=LAYERS)
        data = counting_text(root / "data.jsonl", records=512, length=SEQUENCE_LENGTH)
        for name, method in (("lora", training_pb2.METHOD_LORA), ("full", training_pb2.METHOD_FULL)):
            plan = make_plan(model_dir, data, root / name, method=method, zero_stage=2, ranks=1,
                             max_steps=10_000, micro_batch=MICRO_BATCH, sequence_length=SEQUENCE_LENGTH,
                             learning_rate=1e-4)
            plan_path = write_plan(plan, root / f"{name}.json")
            cfg = run_config_from_plan(parse_plan(plan_path.read_bytes()))
            sink = JsonlProgressSink(cfg.progress_path, cfg.plan_id)
            bare_s, ours_s = _paired_blocks(Trainer(cfg, detect_host(), 0, 1, sink, progress_interval_s=0.0))
            sink.close()
            gc.collect()
            checkpoint_trainer = Trainer(replace(cfg, checkpoint_every_steps=1), detect_host(), 0, 1,
                                         JsonlProgressSink(cfg.progress_path, cfg.plan_id), progress_interval_s=0.0)
            s = checkpoint_trainer.setup()
            started = time.perf_counter()
            checkpoint.save(s.engine, root / name / "bench-ckpt", checkpoint.TrainerState(cfg.plan_id, 1, 1, 1), 0,
                            keep=1, frozen_excluded=method == training_pb2.METHOD_LORA)
            checkpoint_s = time.perf_counter() - started
            ratios = [ours / bare for bare, ours in zip(bare_s, ours_s, strict=True)]
            rows.append([name, f"{HIDDEN_SIZE}x{LAYERS}", f"{MICRO_BATCH}x{SEQUENCE_LENGTH}",
                         f"{BLOCKS} x {STEPS_PER_BLOCK}", f"{statistics.median(bare_s) * 1e3:.1f}",
                         f"{statistics.median(ours_s) * 1e3:.1f}", f"{statistics.median(ratios) - 1:+.2%}",
                         f"{sum(ours_s) / sum(bare_s) - 1:+.2%}", f"{checkpoint_s * 1e3:.0f}"])
    header = ["method", "hidden x layers", "micro-batch x seq", "blocks x steps", "bare DeepSpeed ms/step",
              "executor ms/step", "overhead (median of pairs)", "overhead (totals)", "one checkpoint ms"]
    print_table(f"Executor loop overhead on the CPU ({os.cpu_count()} cores, torch {torch.__version__}, "
                f"DeepSpeed {deepspeed.__version__}); target <= +3 %", header, rows)
    print(f"CSV: {write_csv('training_overhead.csv', header, rows)}")


if __name__ == "__main__":
    prepare()  # set up as a training process is (executor.training.process)
    main()

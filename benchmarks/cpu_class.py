"""`make bench-cpu`: the planner's CPU host class (planner/data/cpus.py) measured on this machine — what a fleet of
CPU hosts, the tests and `make run` train on (DS_ACCELERATOR=cpu, gloo).

Measured: the cores' matmul throughput in fp32, bf16 and fp16 (torch.mm of 2048 x 2048 on every core: the class's
peak FLOP/s), a copy's memory bandwidth, and the executor's own runs (`tunefleet train`, real DeepSpeed on the CPU) of
tiny Llama shapes built here, LoRA and full, at two sequence lengths: each run's median step time after warm-up and
its start-up (the launch to the first step). The step times are fitted as the planner models a step on a CPU host
(planner.throughput: the cores compute and launch, so the shares add: one per decoder-layer pass and one per
trainable parameter, plus the model's FLOPs at a utilisation of the peak); the table then sets the
planner's prediction on the class (its figures as they stand) beside every run.

Write the fitted figures into planner/data/cpus.py and planner/constants.py when the machine's kind changes; the CSV
is benchmarks/results/cpu_class.csv.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from tunefleet.v1 import progress_pb2, training_pb2

from benchmarks.common import filled_text, print_table, write_csv
from devtools.tiny import build_model, make_plan, write_plan

WARMUP_STEPS = 3
STEPS = 16
MATMUL_N = 2048
FP16_MATMUL_N = MATMUL_N // 4  # fp16 has no fast path on most CPUs: a smaller square takes seconds, not minutes
# (hidden size, decoder layers): from the tests' tiny model up to one whose steps are mostly arithmetic
SHAPES = ((64, 2), (256, 4), (512, 6))
SEQUENCES = (32, 128)
METHODS = (("lora", training_pb2.METHOD_LORA), ("full", training_pb2.METHOD_FULL))


def matmul_flops_per_s(dtype_name: str) -> float:
    """torch.mm's FLOP/s on every core; fp16, which has no fast path on most CPUs (0.3 GFLOP/s here at 2048 x 2048),
    on FP16_MATMUL_N's smaller square."""
    import torch

    dtype = getattr(torch, dtype_name)
    n = MATMUL_N if dtype_name != "float16" else FP16_MATMUL_N
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    for _ in range(2):
        torch.mm(a, b)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - start)
    return 2 * n ** 3 / statistics.median(times)


def copy_bytes_per_s() -> float:
    import torch

    src = torch.empty(64 * 2 ** 20, dtype=torch.float32)  # 256 MiB
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - start)
    return 2 * src.numel() * 4 / statistics.median(times)  # read and write


def run(plan_path: Path, out: Path) -> tuple[float, float]:
    """The executor's run of a plan here: its median step time after warm-up and its start-up (from the launch to
    the end of the first step, less one step)."""
    from contract.paths import Roots
    from contract.progress import read_events
    from executor.training.launcher import train

    base = plan_path.parent.resolve()
    launched = time.time()
    result = train(plan_path, progress_interval_s=0, roots=Roots((base,), (base,)))
    if not result.succeeded:
        raise SystemExit(f"executor run failed: {result.last_event.message}")
    training = sorted((e for e in read_events(out / "progress.jsonl") if e.phase == progress_pb2.PHASE_TRAINING),
                      key=lambda e: e.step)  # one event a step (progress_interval_s=0)
    at_s = {e.step: e.time.ToNanoseconds() / 1e9 for e in training}
    step_s = statistics.median(at_s[n] - at_s[n - 1] for n in at_s if n > WARMUP_STEPS and n - 1 in at_s)
    return step_s, at_s[min(at_s)] - launched - step_s


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cpu_class", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.parse_args(argv)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import numpy as np
    from tunefleet.v1 import hardware_pb2, model_pb2

    from contract import training as training_spec
    from planner import convert
    from planner.catalog import default_catalog
    from planner.estimate import startup_s
    from planner.parameters import parameter_split
    from planner.throughput import flops_per_token, step_time

    cores = os.cpu_count() or 1
    peaks = {name: matmul_flops_per_s(name) for name in ("float32", "bfloat16", "float16")}
    bandwidth = copy_bytes_per_s()
    catalog = default_catalog()
    hw = convert.hardware_from_proto(hardware_pb2.HardwareSpec(gpu="cpu"), catalog)
    rows: list[list[object]] = []
    fit_rows: list[tuple[float, ...]] = []
    errors: list[float] = []  # |planner / measured - 1| per run
    startups: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for hidden, layers in SHAPES:
            model_dir = build_model(root / f"model-{hidden}x{layers}", hidden_size=hidden, layers=layers)
            model = convert.model_from_proto(model_pb2.ModelRef(config_json=(model_dir / "config.json").read_text()),
                                             catalog)
            for seq in SEQUENCES:
                data = filled_text(root / f"data-{seq}.jsonl", records=4 * STEPS, words=seq)  # every sample fills seq
                for name, method in METHODS:
                    tag = f"{hidden}x{layers}-{name}-{seq}"
                    plan = make_plan(model_dir, data, root / tag, method=method, max_steps=STEPS,
                                     sequence_length=seq, plan_id=tag, target_modules=("all-linear",))
                    measured_s, started_s = run(write_plan(plan, root / f"{tag}.json"), root / tag)
                    t = training_spec.training_from_proto(plan.training, 1)
                    tokens = t.micro_batch_size * seq * t.gradient_accumulation_steps
                    flops_per_step = flops_per_token(model, t) * tokens
                    planned = step_time(model, t, hw).step_s
                    split = parameter_split(model.architecture, t.method, t.lora, t.train_vision_tower,
                                            t.freeze_trainable_layers)
                    fit_rows.append((model.architecture.num_layers * 3, flops_per_step / peaks["float32"],
                                     split.trainable, measured_s))
                    errors.append(abs(planned / measured_s - 1))
                    startups.append(started_s)
                    rows.append([tag, f"{model.architecture.num_layers}", f"{flops_per_step / 1e9:.2f}",
                                 f"{measured_s * 1000:.1f}", f"{planned * 1000:.1f}",
                                 f"{planned / measured_s - 1:+.1%}", f"{started_s:.1f}",
                                 f"{startup_s(hw):.1f}"])
    x = np.array([r[:3] for r in fit_rows])
    y = np.array([r[3] for r in fit_rows])
    (per_layer_pass_s, inverse_mfu, per_trainable_s), *_ = np.linalg.lstsq(x, y, rcond=None)
    header = ["run (hidden x layers, method, seq)", "layers", "GFLOP a step", "measured step (ms)",
              "planner step (ms)", "planner error", "start-up measured (s)", "start-up planned (s)"]
    print_table(f"CPU host class on this machine ({cores} cores): the executor's steps against the planner's", header,
                rows)
    print(f"\nmedian |planner error| {statistics.median(errors):.1%}, worst {max(errors):.1%}")
    print(f"\nmeasured: fp32 {peaks['float32'] / 1e9:.1f} GFLOP/s, bf16 {peaks['bfloat16'] / 1e9:.1f} GFLOP/s, fp16 "
          f"{peaks['float16'] / 1e9:.1f} GFLOP/s (torch.mm {MATMUL_N}^2, fp16 {FP16_MATMUL_N}^2, on {cores} cores); "
          f"copy "
          f"{bandwidth / 1e9:.1f} GB/s")
    print(f"fitted step: {per_layer_pass_s * 1000:.3f} ms a decoder-layer pass + {per_trainable_s * 1e9:.2f} ns a "
          f"trainable parameter + FLOPs at {1 / inverse_mfu:.1%} of the fp32 peak (catalog now: fp32 "
          f"{hw.gpu.fp32_flops_per_s / 1e9:.1f} GFLOP/s)")
    figures: list[list[object]] = [
        ["fp32 matmul (GFLOP/s)", f"{peaks['float32'] / 1e9:.2f}"],
        ["bf16 matmul (GFLOP/s)", f"{peaks['bfloat16'] / 1e9:.2f}"],
        ["fp16 matmul (GFLOP/s)", f"{peaks['float16'] / 1e9:.2f}"],
        ["copy (GB/s)", f"{bandwidth / 1e9:.2f}"], ["cores", str(cores)],
        ["fitted host s a layer pass", f"{per_layer_pass_s:.6f}"],
        ["fitted host s a trainable parameter", f"{per_trainable_s:.3e}"],
        ["fitted utilisation of the fp32 peak", f"{1 / inverse_mfu:.4f}"],
        ["median start-up (s)", f"{statistics.median(startups):.1f}"],
        ["median |planner error|", f"{statistics.median(errors):.3f}"]]
    print(f"CSV: {write_csv('cpu_class.csv', header, rows)}")
    print(f"CSV: {write_csv('cpu_class_figures.csv', ['figure', 'value'], figures)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A make bench-simulate row on a real CUDA GPU as rank 0 of its N ranks, for the sharded runs one GPU cannot host.

The simulation stands for N ranks with PyTorch's fake process group (collectives return at once and move no data);
this runs the same row the same way on real CUDA tensors: the model built, quantised and wrapped as the simulation
builds it (executor.training.model.from_config, benchmarks.quantised.quantised, benchmarks.recipes.hf_trainer_model),
the recipe's Trainer with the arguments the simulation hands it (benchmarks.recipes.trainer_arguments), on full
micro-batches. Every tensor, kernel and allocation is the real one, bitsandbytes' CUDA kernels included; what the
other ranks would send never arrives (the gathered values are whatever memory held: memory, not loss, is measured)
and the collectives take no time. Per step it records torch.cuda.max_memory_allocated, what was allocated as the
step began, the reserved peak and the step time, beside the simulated peak of the same row
(benchmarks/results/simulate.csv) — the check that the fake-tensor simulation of a sharded step is what a GPU
allocates. With --snapshot, PyTorch's allocator history of the run is kept, replayed to its allocated peak (what was
live there summed by the line that allocated it), and what active blocks hold beyond their requests is summed (the
allocator's rounding, which max_memory_allocated counts and tensors' bytes do not). Rows of transformers' Trainer
(hf-trainer) on one GPU or sharded by FSDP; the executor's own runs are measured by benchmarks/measure_gpu.py.

  python -m benchmarks.measure_gpu_sharded --row "hf-trainer Mistral-7B-v0.3 qlora[q_proj,k_proj,v_proj,o_proj] \
mb2x4096 ckpt sdpa fsdp3 x2"
  python -m benchmarks.measure_gpu_sharded --row "..." --layers 16   # the row's model cut to its first 16 layers
  python -m benchmarks.measure_gpu_sharded --fill-simulated benchmarks/results/gpu_rows.csv   # then, here

On a CUDA host that has torch but cannot install the project (no DeepSpeed is needed), the checkout runs with
PYTHONPATH=.:protos and wheels of constraints.txt's transformers, peft, bitsandbytes, structlog, protobuf and regex
(liger_kernel for a liger row); benchmarks/results/gpu_rows_h200.csv was measured so. make bench-accuracy compares
every benchmarks/results/gpu_rows*.csv (`compare`).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import gzip
import pickle
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, fake_process_group
from benchmarks.simulate_rows import RESULTS_CSV, Row, table_rows
from executor.training.process import prepare

STEPS = 4  # the first warms up; its peak is kept (the optimizer's states are made in it)
GiB = 2**30
COLUMNS = ["row", "layers", "world_size", "device", "torch", "step", "allocated_at_start_bytes", "max_allocated_bytes",
           "max_reserved_bytes", "device_used_bytes", "step_s", "simulated_bytes"]
MEASURED = "gpu_rows*.csv"  # in RESULTS: what make bench-accuracy compares (`compare`)


def _row(label: str) -> Row:
    from contract.schema import Recipe, Sharding

    found = [r for r in table_rows() if r.label == label]
    if not found:
        raise SystemExit(f"no make bench-simulate row is labelled {label!r}: see benchmarks/simulate_rows.py")
    t = found[0].training
    if t.recipe is not Recipe.HF_TRAINER or (t.zero_stage and t.sharding is not Sharding.FSDP):
        raise SystemExit(f"{label!r}: this harness runs transformers' Trainer rows on one GPU or sharded by FSDP; "
                         "measure the executor's runs with benchmarks/measure_gpu.py")
    return found[0]


def _model(row: Row, layers: int, device: str) -> tuple[Any, int]:
    """The row's model on the GPU as the simulation builds it (cut to `layers` decoder layers when asked)."""
    import torch

    from benchmarks.quantised import quantised
    from benchmarks.recipes import hf_trainer_model
    from executor.training.model import from_config, quantization
    from planner.catalog import default_catalog
    from tests.fixtures.hf_configs import hf_config

    config = hf_config(default_catalog().model(row.model).architecture)
    if layers:
        config.num_hidden_layers = layers
    t = row.training
    torch.manual_seed(0)
    with torch.device(device):
        model = from_config(config, t)
    bnb_config = quantization(t)
    if bnb_config is not None:
        model = quantised(model, bnb_config)  # Params4bit._quantize on each real weight, as loading quantises
    _memory().empty_cache()
    return hf_trainer_model(model, t, quantized=bnb_config is not None), config.vocab_size


class _NoCuda:
    """torch.cuda's memory calls answered with zeros, for a check of the harness on the CPU."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: 0


def _memory() -> Any:
    import torch

    return torch.cuda if torch.cuda.is_available() else _NoCuda()


def _steps(model: Any, row: Row, vocab: int, history: bool, device: str) -> tuple[list[dict[str, float]], Any]:
    """STEPS steps of the recipe's Trainer; each step's memory and time, and the allocator's history if asked."""
    import torch
    import transformers

    from benchmarks.recipes import full_sequences, trainer_arguments

    t = row.training
    memory = _memory()
    steps: list[dict[str, float]] = []

    class _Measured(transformers.TrainerCallback):
        started = 0.0
        allocated_at_start = 0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            # the model is wrapped (FSDP has sharded it): what building it on this GPU left cached goes back, as the
            # simulation's allocator replay starts its steps (benchmarks.recipes.loaded); a sharded rank never held
            # its whole model
            memory.empty_cache()

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            memory.synchronize()
            memory.reset_peak_memory_stats()
            self.allocated_at_start = memory.memory_allocated()
            self.started = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            memory.synchronize()
            free, total = memory.mem_get_info() or (0, 0)
            steps.append({"step_s": time.perf_counter() - self.started,
                          "allocated_at_start_bytes": self.allocated_at_start,
                          "max_allocated_bytes": memory.max_memory_allocated(),
                          "max_reserved_bytes": memory.max_memory_reserved(), "device_used_bytes": total - free})

    examples = full_sequences(vocab, t.sequence_length, STEPS * t.micro_batch_size)
    with trainer_arguments(t, row.world_size, device) as args:
        args.max_steps = STEPS
        trainer = transformers.Trainer(model=model, args=args, train_dataset=examples, callbacks=[_Measured()])
        snapshot = None
        if history:
            torch.cuda.memory._record_memory_history(max_entries=400_000, stacks="python")
        trainer.train()
        if history:
            snapshot = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
    return steps, snapshot


def _where(frames: list[dict[str, Any]]) -> str:
    """The innermost line of a library or of tunefleet that asked for the memory (torch's own layers skipped)."""
    for f in frames:
        name = f["filename"]
        if "/torch/" in name and "/distributed/" not in name and "/utils/checkpoint" not in name:
            continue
        short = name.split("site-packages/")[-1].split("/work/")[-1]
        return f"{short}:{f['line']} {f['name']}"
    return "(torch)"


def live_at_peak(trace: list[dict[str, Any]]) -> tuple[int, dict[str, int]]:
    """Replay an allocator history (one device's trace of torch.cuda.memory._snapshot) to its allocated peak: the
    peak's bytes above what was allocated as the history began, and the blocks the history saw allocated that were
    live there, summed by where they were allocated. A block counts from its alloc to its free_completed (one freed
    while another stream still uses it stays allocated until then); a block allocated before the history counts
    out when it is freed."""
    live: dict[int, tuple[int, str]] = {}
    running = peak = 0
    at_peak: dict[int, tuple[int, str]] = {}
    for event in trace:
        if event["action"] == "alloc":
            live[event["addr"]] = (event["size"], _where(event.get("frames", [])))
            running += event["size"]
            if running > peak:
                peak, at_peak = running, dict(live)
        elif event["action"] == "free_completed":
            live.pop(event["addr"], None)
            running -= event["size"]
    by_site: dict[str, int] = collections.Counter()
    for size, site in at_peak.values():
        by_site[site] += size
    return peak, dict(by_site)


def rounding_bytes(snapshot: dict[str, Any]) -> int:
    """What the caching allocator counts as allocated beyond what the live tensors asked for: each active block's
    size less its requested size (a block's rounding to 512 bytes, and the remainder of a cached block it did not
    split — up to 1 MiB a block from the large pool). torch.cuda.max_memory_allocated counts it; tensors' bytes, and
    so the simulation, do not."""
    return sum(block["size"] - block["requested_size"] for segment in snapshot["segments"]
               for block in segment["blocks"] if block["state"] == "active_allocated")


def _simulated(label: str) -> int:
    with RESULTS_CSV.open() as f:
        return next((int(r["simulated_bytes"]) for r in csv.DictReader(f) if r["row"] == label), 0)


def simulated_bytes(label: str, layers: int) -> int:
    """The simulated peak of a row: make bench-simulate's stored one, or for a model cut to `layers` layers the
    simulation run now (on this machine's CPU, under fake tensors)."""
    if not layers:
        return _simulated(label)
    from benchmarks.simulate import simulate
    from planner.catalog import default_catalog
    from planner.hf_config import config_json

    row = _row(label)
    config = config_json(default_catalog().model(row.model).architecture)
    return simulate({**config, "num_hidden_layers": layers}, row.training, row.world_size).peak_bytes


def fill_simulated(path: Path) -> None:
    """Give every measured row of `path` without one its simulated peak (the GPU host has no DeepSpeed to simulate
    with), rewriting the file."""
    with path.open() as f:
        rows = list(csv.DictReader(f))
    known: dict[tuple[str, str], int] = {}
    for r in rows:
        if not int(r.get("simulated_bytes") or 0):
            key = (r["row"], r["layers"])
            if key not in known:
                known[key] = simulated_bytes(r["row"], int(r["layers"]))
            r["simulated_bytes"] = str(known[key])
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def planned(label: str, layers: int) -> tuple[Any, Any]:
    """The planner's breakdown for a row (its model cut to `layers` layers when the measurement was) and Fit's likely
    range of what the GPU shows."""
    from dataclasses import replace

    from planner.catalog import default_catalog
    from planner.confidence import band
    from planner.memory import gpu_memory

    row = _row(label)
    architecture = default_catalog().model(row.model).architecture
    if layers:
        architecture = replace(architecture, num_layers=layers)
    breakdown = gpu_memory(architecture, row.training, row.world_size)
    return breakdown, band(breakdown, architecture, row.training)


def measured_peaks() -> dict[tuple[str, int], dict[str, str]]:
    """Each measured (row, layers) of gpu_rows*.csv: its step with the highest peak allocated."""
    peaks: dict[tuple[str, int], dict[str, str]] = {}
    for path in sorted(RESULTS.glob(MEASURED)):
        for r in csv.DictReader(path.open()):
            key = (r["row"], int(r["layers"]))
            if key not in peaks or int(r["max_allocated_bytes"]) > int(peaks[key]["max_allocated_bytes"]):
                peaks[key] = r
    return peaks


def compare() -> None:
    """The rows measured on a GPU (gpu_rows*.csv): each row's peak allocated against its simulation plus cuBLAS's
    workspace (which only a GPU allocates) and against the planner's allocated bytes; the device's used memory
    against Fit's total and its likely range."""
    from benchmarks.common import print_table
    from planner.constants import CUBLAS_WORKSPACE_BYTES

    peaks = measured_peaks()
    if not peaks:
        return
    rows = list(peaks.values())
    table, simulated_errors, planned_errors, inside = [], [], [], 0
    for (label, layers), r in peaks.items():
        measured, used = int(r["max_allocated_bytes"]), int(r["device_used_bytes"])
        simulated = int(r["simulated_bytes"]) + CUBLAS_WORKSPACE_BYTES
        breakdown, likely = planned(label, layers)
        simulated_errors.append(simulated / measured - 1)
        planned_errors.append(breakdown.allocated_bytes / measured - 1)
        inside += likely.low_bytes <= used <= likely.high_bytes
        table.append([label, layers or "all", f"{measured / GiB:.3f}", f"{simulated / GiB:.3f}",
                      f"{simulated_errors[-1]:+.2%}", f"{breakdown.allocated_bytes / GiB:.3f}",
                      f"{planned_errors[-1]:+.2%}", f"{used / GiB:.2f}", f"{breakdown.total_bytes / GiB:.2f}",
                      f"{likely.low_bytes / GiB:.2f}-{likely.high_bytes / GiB:.2f}"])
    print_table(f"make bench-simulate rows run for real ({rows[0]['device']}, torch {rows[0]['torch']}; "
                "benchmarks/measure_gpu_sharded.py; several ranks as rank 0 of the fake process group)",
                ["configuration", "layers", "allocated GiB", "simulated + cuBLAS", "error", "planned", "error",
                 "device used GiB", "Fit's total", "Fit's range"], table)
    print(f"{len(table)} rows: the simulation within {min(simulated_errors):+.2%}..{max(simulated_errors):+.2%}, "
          f"the planner within {min(planned_errors):+.2%}..{max(planned_errors):+.2%} of the GPU's peak allocated; "
          f"the device's used memory inside Fit's range on {inside}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--row", help="a make bench-simulate row's label (benchmarks/simulate_rows.py)")
    p.add_argument("--layers", type=int, default=0, help="cut the model to its first N decoder layers (a model "
                                                         "whose dense weights would not fit the GPU while it loads)")
    p.add_argument("--snapshot", type=Path, help="folder for the allocator history (gzipped pickle) and its summary")
    p.add_argument("--out", type=Path, default=RESULTS / "gpu_rows.csv",
                   help="CSV to append the steps to (make bench-accuracy reads benchmarks/results/gpu_rows*.csv)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: check the harness (memory reads as zero; the row's model best cut with --layers)")
    p.add_argument("--fill-simulated", type=Path, metavar="CSV",
                   help="after a GPU run: simulate here the rows of CSV that lack a simulated peak (cut models)")
    a = p.parse_args()
    if a.fill_simulated:
        fill_simulated(a.fill_simulated)
        return
    if not a.row:
        p.error("give --row (or --fill-simulated)")
    row = _row(a.row)
    # a sharded row's ranks as the simulation's are; a one-GPU row runs as the simulation runs it, without a group
    with fake_process_group(row.world_size) if row.world_size > 1 else contextlib.nullcontext():
        model, vocab = _model(row, a.layers, a.device)
        loaded_bytes = _memory().memory_allocated()
        steps, snapshot = _steps(model, row, vocab, a.snapshot is not None and a.device == "cuda", a.device)
    _report(a, row, loaded_bytes, steps)
    if snapshot is not None:
        _write_snapshot(a.snapshot, snapshot)


def _report(a: argparse.Namespace, row: Row, loaded_bytes: int, steps: list[dict[str, float]]) -> None:
    """Print the row's result and append its steps to the CSV."""
    import torch

    device = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    simulated = _simulated(a.row) if not a.layers else 0  # a cut model's: --fill-simulated, where DeepSpeed is
    print(f"{a.row} layers {a.layers or 'all'}: loaded {loaded_bytes / GiB:.3f} GiB, peak allocated "
          f"{max(s['max_allocated_bytes'] for s in steps) / GiB:.3f} GiB (simulated {simulated / GiB:.3f}), steps "
          + ", ".join(f"{s['allocated_at_start_bytes'] / GiB:.3f}->{s['max_allocated_bytes'] / GiB:.3f}"
                      for s in steps) + f", median step {statistics.median(s['step_s'] for s in steps[1:]):.3f} s",
          flush=True)
    exists = a.out.exists()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with a.out.open("a", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        if not exists:
            writer.writerow(COLUMNS)
        for i, s in enumerate(steps):
            writer.writerow([a.row, a.layers, row.world_size, device, torch.__version__, i,
                             s["allocated_at_start_bytes"], s["max_allocated_bytes"], s["max_reserved_bytes"],
                             s["device_used_bytes"], f"{s['step_s']:.4f}", simulated])


def _write_snapshot(folder: Path, snapshot: dict[str, Any]) -> None:
    """The allocator history (gzipped pickle, for PyTorch's memory viewer) and what was live at its peak."""
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / "snapshot.pickle.gz", "wb") as g:
        pickle.dump(snapshot, g)
    above, by_site = live_at_peak(snapshot["device_traces"][0])
    rounding_mib = rounding_bytes(snapshot) / 2**20
    lines = [f"allocated beyond the live tensors' requests as the history ended: {rounding_mib:.1f} MiB (the caching "
             "allocator's rounding and unsplit remainders)",
             f"the replayed peak is {above / GiB:.3f} GiB above what was allocated as the history began; of it:"]
    lines += [f"{size / GiB:9.3f} GiB  {site}" for site, size in sorted(by_site.items(), key=lambda kv: -kv[1])
              if size >= 2**20]
    (folder / "at_peak.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:40]), flush=True)


if __name__ == "__main__":
    prepare()  # set up as a training process is (executor.training.process)
    main()

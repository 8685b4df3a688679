"""Measure real peak memory and step time of training configurations, for the planner's accuracy benchmark.

Each group (model × method × ZeRO stage × offload × checkpointing) runs in its own process: a randomly
initialised model built from the catalog architecture's real config and wrapped by the executor's own functions
(executor.training.model: checkpointing, PEFT adapters, training mode; QLoRA saved locally and read back through
`load_model`, which quantises it with bitsandbytes), the DeepSpeed engine from the planner's generated config,
then a sweep of micro-batch × sequence length, smallest first. A group whose recipe is hf-trainer runs transformers'
Trainer + PEFT instead, the model and arguments as benchmarks/recipes.py has the simulation build them, a fresh Trainer
for each shape. Per shape it records torch.cuda.max_memory_allocated,
max_memory_reserved, the device's used memory (what nvidia-smi shows for the only process on the GPU) and
the median step time after a warm-up step, with the planner's prediction beside them, to
benchmarks/results/gpu_measurements.csv.

  python -m benchmarks.measure_gpu                   # the default matrix, on a CUDA GPU
  python -m benchmarks.measure_gpu --matrix smoke    # a tiny matrix on the CPU, to check the harness

On a CUDA host that has torch but cannot install the project, the checkout runs with PYTHONPATH=.:protos and the
pins of constraints.txt for transformers, peft, deepspeed (FusedAdam JIT-builds: nvcc and ninja), bitsandbytes,
accelerate, trl with datasets, dill and multiprocess, structlog, pydantic, hjson and googleapis-common-protos, and
grpcio-health-checking, -reflection and -status at the host's grpcio version. Import benchmarks.measure_gpu,
executor.training.model and trl.trainer.utils once first: a missing package then fails in seconds, not in every group.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, as_single_rank
from contract.deepspeed_config import deepspeed_config
from contract.schema import Attention, Hardware, LoraSpec, Method, Offload, Precision, Recipe, TrainingSpec
from executor.training.process import prepare
from planner.catalog import default_catalog
from planner.memory import per_gpu_memory
from planner.throughput import step_time

GROUP_TIMEOUT_S = 540  # inside the GPU host's 10-minute command limit
WARMUP_STEPS = 1
MEASURED_STEPS = 3


@dataclass(frozen=True)
class Group:
    """Configurations that share one loaded model; shapes run smallest first."""

    model: str
    method: str
    zero_stage: int = 0
    offload: str = "none"
    gradient_checkpointing: bool = True
    attention: str = "sdpa"
    lora_rank: int = 16
    shapes: tuple[tuple[int, int], ...] = ((1, 512), (4, 512), (1, 2048), (2, 2048))
    gpu: str = "h100-sxm-80gb"
    recipe: str = "tunefleet"  # or hf-trainer: transformers' Trainer + PEFT as a user's script runs it


_SHAPES_LONG = ((1, 1024), (1, 4096), (2, 4096))
# Most asked-about first, so that a sweep cut short by the GPU host's command limit keeps the rows that matter
# most; the offload groups, which JIT-build DeepSpeed's CPU Adam, last.
DEFAULT_MATRIX = [
    Group("meta-llama/Llama-3.2-1B", "lora"),
    Group("meta-llama/Llama-3.2-1B", "full"),
    Group("meta-llama/Llama-3.2-1B", "qlora"),
    Group("meta-llama/Llama-3.1-8B", "lora", shapes=_SHAPES_LONG),
    Group("meta-llama/Llama-3.1-8B", "qlora", shapes=_SHAPES_LONG),
    Group("meta-llama/Llama-3.1-8B", "lora", zero_stage=3, shapes=_SHAPES_LONG),
    Group("meta-llama/Llama-3.2-1B", "full", gradient_checkpointing=False),
    Group("meta-llama/Llama-3.2-1B", "full", zero_stage=2),
    Group("meta-llama/Llama-3.2-1B", "full", zero_stage=3),
    Group("meta-llama/Llama-3.2-1B", "lora", gradient_checkpointing=False, attention="eager"),
    Group("meta-llama/Llama-3.2-3B", "lora", shapes=_SHAPES_LONG),
    Group("meta-llama/Llama-3.2-3B", "qlora", shapes=_SHAPES_LONG),
    Group("Qwen/Qwen2.5-1.5B", "full", zero_stage=2, offload="optimizer"),
    Group("meta-llama/Llama-3.2-1B", "full", zero_stage=3, offload="all"),
    Group("meta-llama/Llama-3.2-1B", "lora", recipe="hf-trainer"),
    Group("meta-llama/Llama-3.2-1B", "full", recipe="hf-trainer"),
    Group("meta-llama/Llama-3.1-8B", "lora", recipe="hf-trainer", shapes=_SHAPES_LONG),
]
SMOKE_MATRIX = [
    Group("tiny", "full", shapes=((1, 32), (2, 64)), gpu="cpu"),
    Group("tiny", "lora", zero_stage=3, shapes=((1, 32), (2, 32)), gpu="cpu"),
    Group("tiny", "qlora", shapes=((1, 32),), gpu="cpu"),
    Group("tiny", "lora", shapes=((1, 32), (2, 32)), gpu="cpu", recipe="hf-trainer"),
]
_METHOD = {"full": Method.FULL, "lora": Method.LORA, "qlora": Method.QLORA}
_OFFLOAD = {"none": Offload.NONE, "optimizer": Offload.OPTIMIZER, "all": Offload.ALL}
_ATTENTION = {"sdpa": Attention.SDPA, "eager": Attention.EAGER, "flash": Attention.FLASH}
TRAINER_STEPS = WARMUP_STEPS + MEASURED_STEPS
MEASURED = "measured: "  # a group's result line, apart from what the libraries print (the Trainer its losses)


@dataclass
class Measurement:
    micro_batch: int
    sequence_length: int
    status: str = "ok"
    max_allocated_bytes: int = 0
    max_reserved_bytes: int = 0
    device_used_bytes: int = 0
    non_pytorch_bytes: int = 0  # device used less what PyTorch's allocator holds: CUDA context, NCCL, cuBLAS
    checkpointing_in_effect: bool = False  # asked for, and the model in training mode (where transformers applies it)
    optimizer: str = ""  # DeepSpeed's wrapper and the optimizer inside it
    step_time_s: float = 0.0
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def training_spec(g: Group, micro_batch: int, sequence_length: int) -> TrainingSpec:
    return TrainingSpec(method=_METHOD[g.method], micro_batch_size=micro_batch, sequence_length=sequence_length,
                        precision=Precision.BF16, zero_stage=g.zero_stage, offload=_OFFLOAD[g.offload],
                        gradient_checkpointing=g.gradient_checkpointing, attention=_ATTENTION[g.attention],
                        lora=LoraSpec(rank=g.lora_rank, alpha=2.0 * g.lora_rank, dropout=0.0), recipe=Recipe(g.recipe))


# --- one group, in its own process ------------------------------------------------------------------
def _config(g: Group) -> Any:
    import transformers

    from tests.fixtures.hf_configs import hf_config

    if g.model == "tiny":
        return transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                        num_attention_heads=4, num_key_value_heads=2, vocab_size=256)
    return hf_config(default_catalog().model(g.model).architecture)


def _build(g: Group, device: str, workdir: Path) -> Any:
    """The model as the executor loads and wraps it (executor.training.model): dense weights made on the device with
    `from_config`; QLoRA's saved and read back through the executor's `load_model`, which quantises on load."""
    import torch

    from contract.run_config import DatasetConfig, RunConfig
    from executor.training.model import Host, from_config, load_model, prepare_model

    config = _config(g)
    t = training_spec(g, 1, 1)
    torch.manual_seed(0)
    with torch.device(device):
        model = from_config(config, t)
    if g.method != "qlora":
        return prepare_model(model, t), config.vocab_size
    model.save_pretrained(workdir)
    del model
    cfg = RunConfig(plan_id=g.model, model_path=str(workdir), dataset=DatasetConfig(), training=t, world_size=1,
                    max_steps=1, epochs=1.0, seed=0, checkpoint_every_steps=0, output_dir=workdir,
                    deepspeed_config_json="{}")
    return load_model(cfg, Host(gpu_count=int(device == "cuda"))), config.vocab_size


def _engine(g: Group, model: Any, micro_batch: int) -> Any:
    import deepspeed

    t = training_spec(g, micro_batch, 1)
    config = deepspeed_config(t, 1, warmup_steps=0)
    # The executor's optimizer, DeepSpeed's FusedAdam, JIT-built by the first group (about a minute; later groups load
    # it from torch's extensions cache). Not torch's AdamW (torch_adam): DeepSpeed wraps an optimizer that is not
    # its own FusedAdam in FP16_UnfusedOptimizer at ZeRO-0, whose step holds one fp32 gradient at a time where the
    # executor's FP16_Optimizer flattens them all (runtime/engine.py: _configure_fp16_optimizer). Measured on an H100
    # with torch's AdamW, a Llama-3.2-1B full ZeRO-0 step peaked 4 bytes a parameter below the executor's.
    engine, *_ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters() if p.requires_grad],
                                      config=config)
    return engine


def _measure_shape(engine: Any, vocab: int, micro_batch: int, seq: int, device: str) -> Measurement:
    import torch

    m = Measurement(micro_batch, seq)
    cuda = device == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    times = []
    try:
        for step in range(WARMUP_STEPS + MEASURED_STEPS):
            ids = torch.randint(0, vocab, (micro_batch, seq), device=engine.device)
            if cuda:
                torch.cuda.synchronize()
            started = time.perf_counter()
            loss = engine(input_ids=ids, labels=ids).loss
            engine.backward(loss)
            engine.step()
            if cuda:
                torch.cuda.synchronize()
            if step >= WARMUP_STEPS:
                times.append(time.perf_counter() - started)
    except torch.OutOfMemoryError as e:
        m.status, m.error = "oom", str(e).splitlines()[0][:200]
    m.step_time_s = statistics.median(times) if times else 0.0
    _device_memory(m, device)
    return m


def _device_memory(m: Measurement, device: str) -> None:
    import torch

    if device == "cuda":
        free, total = torch.cuda.mem_get_info()
        m.non_pytorch_bytes = total - free - torch.cuda.memory_reserved()
        m.max_allocated_bytes = torch.cuda.max_memory_allocated()
        m.max_reserved_bytes = torch.cuda.max_memory_reserved()
        m.device_used_bytes = total - free
    else:
        import resource

        m.max_allocated_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _trainer_shape(model: Any, g: Group, vocab: int, micro_batch: int, seq: int, device: str) -> Measurement:
    """TRAINER_STEPS steps of Trainer.train() as benchmarks/recipes.py has the simulation run them (its arguments,
    full micro-batches at the plan's length), on the real device; each step timed by a callback."""
    import gc

    import torch
    import transformers

    from benchmarks.recipes import full_sequences, trainer_arguments

    m = Measurement(micro_batch, seq)
    t = training_spec(g, micro_batch, seq)
    cuda = device == "cuda"
    times: list[float] = []

    class _Timed(transformers.TrainerCallback):
        started = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if cuda:
                torch.cuda.synchronize()
            self.started = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - self.started)

    examples = full_sequences(vocab, seq, TRAINER_STEPS * micro_batch)
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    try:
        with trainer_arguments(t, 1, device) as args:
            args.max_steps = TRAINER_STEPS
            trainer = transformers.Trainer(model=model, args=args, train_dataset=examples, callbacks=[_Timed()])
            trainer.train()
            # what the Trainer switched on, as the executor's groups read it off their engine's module
            m.checkpointing_in_effect = bool(getattr(model, "is_gradient_checkpointing", False))
            m.optimizer = type(trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer")
                               else trainer.optimizer).__name__
    except torch.OutOfMemoryError as e:
        m.status, m.error = "oom", str(e).splitlines()[0][:200]
    m.step_time_s = statistics.median(times[WARMUP_STEPS:]) if len(times) > WARMUP_STEPS else 0.0
    _device_memory(m, device)
    trainer = None
    for p in model.parameters():
        p.grad = None
    gc.collect()
    return m


def run_trainer_group(g: Group) -> list[Measurement]:
    """A recipe group: the model as the simulation builds it for the recipe, a fresh Trainer for every shape."""
    import torch

    from benchmarks.recipes import hf_trainer_model
    from executor.training.model import from_config

    device = "cuda" if g.gpu != "cpu" else "cpu"
    config = _config(g)
    t = training_spec(g, 1, 1)
    torch.manual_seed(0)
    with torch.device(device):
        model = hf_trainer_model(from_config(config, t), t, quantized=False)
    out = []
    for micro_batch, seq in g.shapes:
        m = _trainer_shape(model, g, config.vocab_size, micro_batch, seq, device)
        out.append(m)
        print(MEASURED + json.dumps(asdict(m)), flush=True)
        if m.status == "oom":
            break
    return out


def run_group(g: Group) -> list[Measurement]:
    if g.recipe != "tunefleet":
        return run_trainer_group(g)
    import deepspeed

    device = "cuda" if g.gpu != "cpu" else "cpu"
    as_single_rank()
    deepspeed.init_distributed(dist_backend="nccl" if device == "cuda" else "gloo")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        model, vocab = _build(g, device, Path(tmp))
        # One engine for every shape: DeepSpeed takes whatever batch it is given; the configured micro-batch
        # only enters its batch-size bookkeeping.
        engine = _engine(g, model, 1)
        in_effect = bool(getattr(engine.module, "is_activation_checkpointing", False)) and engine.module.training
        inner = getattr(engine.optimizer, "optimizer", engine.optimizer)
        optimizer = f"{type(engine.optimizer).__name__}({type(inner).__name__})"
        for micro_batch, seq in g.shapes:
            m = _measure_shape(engine, vocab, micro_batch, seq, device)
            m.checkpointing_in_effect, m.optimizer = in_effect, optimizer
            out.append(m)
            print(MEASURED + json.dumps(asdict(m)), flush=True)
            if m.status == "oom":
                break
    return out


# --- the sweep, in the parent -------------------------------------------------------------------------
def _versions() -> dict[str, str]:
    code = ("import json, torch, transformers, peft, deepspeed\n"
            "v = dict(torch=torch.__version__, transformers=transformers.__version__, peft=peft.__version__, "
            "deepspeed=deepspeed.__version__, cuda=str(torch.version.cuda), "
            "device_name=torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')\n"
            "try:\n import bitsandbytes; v['bitsandbytes'] = bitsandbytes.__version__\n"
            "except ImportError:\n v['bitsandbytes'] = ''\nprint(json.dumps(v))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def _prediction(g: Group, micro_batch: int, seq: int) -> tuple[int, int, float]:
    """(total the card must hold, the allocated part, step time) as the planner predicts them."""
    if g.model == "tiny":
        return 0, 0, 0.0
    catalog = default_catalog()
    model, hw = catalog.model(g.model), Hardware(gpu=catalog.gpu(g.gpu), host_memory_bytes=2**40)
    t = training_spec(g, micro_batch, seq)
    m = per_gpu_memory(model, t, hw)
    return m.total_bytes, m.allocated_bytes, step_time(model, t, hw).step_s


def _selection(text: str, count: int) -> set[int]:
    if not text:
        return set(range(count))
    chosen: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        chosen.update(range(int(first), int(last or first) + 1))
    return chosen


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--matrix", choices=["default", "smoke"], default="default")
    p.add_argument("--out", type=Path, default=RESULTS / "gpu_measurements.csv",
                   help="CSV to write (make bench-accuracy reads every benchmarks/results/gpu_measurements*.csv)")
    p.add_argument("--groups", default="", help="run only these groups of the matrix, e.g. 0-6 or 7,9 "
                                                "(to split a sweep across several 10-minute commands)")
    p.add_argument("--group-timeout-s", type=int, default=GROUP_TIMEOUT_S,
                   help="stop a group that runs longer (its finished shapes are kept)")
    p.add_argument("--one", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        run_group(Group(**{k: tuple(map(tuple, v)) if k == "shapes" else v for k, v in json.loads(a.one).items()}))
        return
    matrix = SMOKE_MATRIX if a.matrix == "smoke" else DEFAULT_MATRIX
    selected = _selection(a.groups, len(matrix))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if a.matrix == "smoke":
        env["DS_ACCELERATOR"] = "cpu"
    versions = _versions()
    rows = []
    for index, g in enumerate(matrix):
        if index not in selected:
            continue
        env["MASTER_PORT"] = str(29600 + index)
        print(f"[{index + 1}/{len(matrix)}] {g.model} {g.method} ZeRO-{g.zero_stage} offload {g.offload} "
              f"ckpt {g.gradient_checkpointing} {g.attention} {g.recipe}", flush=True)
        try:
            proc = subprocess.run([sys.executable, "-m", "benchmarks.measure_gpu", "--one", json.dumps(asdict(g))],
                                  capture_output=True, text=True, env=env, timeout=a.group_timeout_s)
            lines, failure = proc.stdout.splitlines(), "" if proc.returncode == 0 else proc.stderr[-300:]
        except subprocess.TimeoutExpired as e:
            # what the group printed before it was stopped comes back as bytes, whatever text= said
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
            lines, failure = out.splitlines(), f"timed out after {a.group_timeout_s} s"
        measured = [json.loads(line.removeprefix(MEASURED)) for line in lines if line.startswith(MEASURED)]
        done = {(m["micro_batch"], m["sequence_length"]) for m in measured}
        measured += [asdict(Measurement(mb, seq, status="error", error=failure.replace("\n", " ")))
                     for mb, seq in g.shapes if (mb, seq) not in done]
        for m in measured:
            total, allocated, predicted_step_s = _prediction(g, m["micro_batch"], m["sequence_length"])
            row = {**{k: v for k, v in asdict(g).items() if k != "shapes"}, **{k: v for k, v in m.items()
                                                                                 if k != "extra"},
                   "predicted_total_bytes": total, "predicted_allocated_bytes": allocated,
                   "predicted_step_time_s": predicted_step_s, **versions, "python": platform.python_version()}
            rows.append(row)
            print(f"    mb {m['micro_batch']} x {m['sequence_length']}: {m['status']}, allocated "
                  f"{m['max_allocated_bytes'] / 2**30:.2f} GiB (planned {allocated / 2**30:.2f}), reserved "
                  f"{m['max_reserved_bytes'] / 2**30:.2f}, device {m['device_used_bytes'] / 2**30:.2f} "
                  f"(planned {total / 2**30:.2f}; outside PyTorch {m['non_pytorch_bytes'] / 2**30:.2f}), step "
                  f"{m['step_time_s']:.3f} s (planned {predicted_step_s:.3f}) {m['error'][:120]}", flush=True)
        _write(a.out, rows)  # after every group, so a cut-off sweep keeps what it measured
    print(f"CSV: {a.out}")


if __name__ == "__main__":
    prepare()  # set up as a training process is (executor.training.process)
    main()

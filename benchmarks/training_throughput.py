"""Training throughput: the executor (`tunefleet train`) next to the plain transformers Trainer with the same
DeepSpeed config, model and data, for LoRA and full fine-tuning. Reports tokens/s after warm-up and the
model FLOP/s utilisation (the planner's FLOPs per token × tokens/s ÷ the GPU's peak bf16 FLOP/s).

  python -m benchmarks.training_throughput           # Llama-3.2-1B shape, random weights, on a CUDA GPU
  python -m benchmarks.training_throughput --smoke   # a tiny model on the CPU, to check the harness
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tunefleet.v1 import progress_pb2, training_pb2

from benchmarks.common import as_single_rank, filled_text, print_table, write_csv
from contract import training as training_spec
from contract.progress import read_events
from devtools.tiny import build_model, make_plan, write_plan
from planner.catalog import default_catalog
from planner.throughput import flops_per_token

WARMUP_STEPS = 3
MODEL = "meta-llama/Llama-3.2-1B"


def _model_dir(root: Path, smoke: bool) -> Path:
    if smoke:
        return build_model(root / "model")
    import torch
    import transformers

    from tests.fixtures.hf_configs import hf_config

    tokenizer_dir = build_model(root / "tokenizer-source")  # a local word-level tokenizer; ids stay in range
    config = hf_config(default_catalog().model(MODEL).architecture)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).save_pretrained(root / "model")
    transformers.AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(root / "model")
    return root / "model"


def _executor_tokens_per_s(plan_path: Path, out: Path) -> float:
    from contract.paths import Roots
    from executor.training.launcher import train

    base = plan_path.parent.resolve()  # model, data, plan and run all live in the benchmark's scratch directory
    result = train(plan_path, progress_interval_s=0, roots=Roots((base,), (base,)))
    if not result.succeeded:
        raise SystemExit(f"executor run failed: {result.last_event.message}")
    rates = [e.tokens_per_s for e in read_events(out / "progress.jsonl")
             if e.phase == progress_pb2.PHASE_TRAINING and e.step > WARMUP_STEPS]
    return statistics.median(rates)


def _trainer_tokens_per_s(model_dir: Path, data: Path, ds_config: dict[str, Any], method: int, micro_batch: int,
                          seq: int, steps: int, bf16: bool, out: Path) -> float:
    import datasets
    import transformers
    from peft import LoraConfig, get_peft_model

    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    rows = datasets.load_dataset("json", data_files=str(data), split="train")
    rows = rows.map(lambda r: tokenizer(r["text"], truncation=True, max_length=seq), remove_columns=["text"])
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype="bfloat16" if bf16 else "float32")
    if method == training_pb2.METHOD_LORA:
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear"))
    times: list[float] = []

    class _Clock(transformers.TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.started = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step > WARMUP_STEPS:
                times.append(time.perf_counter() - self.started)

    trainer_config = {k: v for k, v in ds_config.items() if k not in ("optimizer", "scheduler")}
    args = transformers.TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=micro_batch, max_steps=steps, learning_rate=1e-4,
        bf16=bf16, deepspeed=trainer_config, report_to=[], save_strategy="no", logging_strategy="no",
        dataloader_drop_last=True)
    collator = transformers.DataCollatorForLanguageModeling(tokenizer, mlm=False)
    transformers.Trainer(model=model, args=args, train_dataset=rows, data_collator=collator,
                         callbacks=[_Clock()]).train()
    return micro_batch * seq / statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny model on the CPU")
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    if a.smoke:
        os.environ["DS_ACCELERATOR"] = "cpu"
    as_single_rank()  # the Trainer runs in this process (the executor starts its own ranks)
    micro_batch, seq = (2, 32) if a.smoke else (4, 2048)
    catalog = default_catalog()
    gpu = catalog.gpu("h100-sxm-80gb")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir = _model_dir(root, a.smoke)
        data = filled_text(root / "data.jsonl", records=micro_batch * (a.steps + 2), words=seq)
        for name, method in (("lora", training_pb2.METHOD_LORA), ("full", training_pb2.METHOD_FULL)):
            precision = training_pb2.PRECISION_FP32 if a.smoke else training_pb2.PRECISION_BF16
            plan = make_plan(model_dir, data, root / name, method=method, zero_stage=2, max_steps=a.steps,
                             micro_batch=micro_batch, sequence_length=seq, learning_rate=1e-4, precision=precision,
                             target_modules=("all-linear",), plan_id=f"throughput-{name}")
            ours = _executor_tokens_per_s(write_plan(plan, root / f"{name}.json"), root / name)
            theirs = _trainer_tokens_per_s(model_dir, data, json.loads(plan.deepspeed_config_json), method,
                                           micro_batch, seq, a.steps, not a.smoke, root / f"{name}-trainer")
            spec = training_spec.training_from_proto(plan.training, 1)
            per_token = flops_per_token(catalog.model(MODEL), spec) if not a.smoke else 0.0
            mfu = [f"{rate * per_token / gpu.bf16_flops_per_s:.1%}" if per_token else "-" for rate in (ours, theirs)]
            rows.append([name, f"{micro_batch}x{seq}", a.steps, f"{ours:,.0f}", mfu[0], f"{theirs:,.0f}", mfu[1],
                         f"{ours / theirs - 1:+.1%}"])
    header = ["method", "micro-batch x seq", "steps", "executor tokens/s", "executor MFU", "Trainer tokens/s",
              "Trainer MFU", "executor vs Trainer"]
    print_table(f"Training throughput, {'tiny model on the CPU' if a.smoke else MODEL + ' shape'} (ZeRO-2)",
                header, rows)
    if not a.smoke:  # a smoke run checks the harness; its numbers are not results
        print(f"CSV: {write_csv('training_throughput.csv', header, rows)}")


if __name__ == "__main__":
    main()

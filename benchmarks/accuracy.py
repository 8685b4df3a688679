"""Planner accuracy against measured peak memory and throughput.

Reads benchmarks/data/public_measurements.csv (third-party measurements with their full configurations,
copied from the team's shared calibration set) and, when present, benchmarks/results/gpu_measurements.csv
(our own runs). Each row is interpreted into planner terms by the same rules (no per-row cases); rows the
planner cannot express are listed with the reason. Memory is compared like for like: rows measured with
nvidia-smi / NVML reserved against Fit's total (what the card must hold), rows measured with
torch.cuda.max_memory_allocated against the total less the CUDA context and the allocator's slack.

Targets (issue 25): third-party memory median |error| <= 6 %, no row under the measurement by more than 10 %;
throughput median |error| <= 10 %.
"""

from __future__ import annotations

import csv
import re
import statistics
from dataclasses import dataclass, replace

from benchmarks.common import PUBLIC, RESULTS, print_table, write_csv
from common.units import GiB
from contract.errors import SpecError
from contract.model import Architecture, Family, ModelSpec
from contract.schema import (
    ALL_LINEAR,
    Attention,
    Hardware,
    LoadDtype,
    LoraSpec,
    Method,
    Offload,
    Precision,
    Recipe,
    Sharding,
    TrainingSpec,
)
from planner import recipes
from planner.catalog import Catalog, default_catalog
from planner.memory import per_gpu_memory
from planner.throughput import step_time

# issue 25's goal for the third-party rows: median |error| <= 6 %, none under the measurement by more than 10 %
UNDER_PREDICTION_LIMIT = -0.10
# Qwen (v1) names its linears differently; these are the same layers in the Llama layout. Its attention's output
# projection and its MLP's down projection are both called c_proj (modeling_qwen.py: QWenAttention.c_proj,
# QWenMLP.c_proj), so PEFT's suffix match puts an adapter on both.
_TARGET_ALIASES = {"c_attn": ("q_proj", "k_proj", "v_proj"), "c_proj": ("o_proj", "down_proj"), "w1": ("up_proj",),
                   "w2": ("gate_proj",)}
_GPU_PATTERNS = [(r"a100.*80", "a100-80gb"), (r"a100.*40|^40gb", "a100-40gb"), (r"h100", "h100-sxm-80gb"),
                 (r"l40s", "l40s-48gb"), (r"a10g|^24gb", "a10g-24gb"), (r"l4\b", "l4-24gb")]


class NotExpressibleError(Exception):
    """The planner cannot express this row; the message says why."""


@dataclass(frozen=True)
class Case:
    row: int
    label: str
    model: ModelSpec
    training: TrainingSpec
    hardware: Hardware
    figure: str  # "nvidia-smi" or "allocated"
    measured_bytes: float
    measured_tokens_per_s: float
    # Some rows report torch.cuda.max_memory_allocated beside the nvidia-smi figure.
    measured_allocated_bytes: float = 0.0


_ALLOCATED_NOTE = re.compile(r"torch peak allocated ([\d.]+) GiB")
# Some rows give speed as the Trainer's seconds per optimizer step ("5.2 s/it") beside the gradient accumulation.
_SECONDS_PER_STEP_NOTE = re.compile(r"([\d.]+) s/it")
_ACCUMULATION_NOTE = re.compile(r"grad-accum (\d+)")


def _int(text: str) -> int:
    m = re.match(r"\s*(\d+)", text)
    if not m:
        raise NotExpressibleError(f"no number in {text!r}")
    return int(m.group(1))


def _tokens_per_s(r: dict[str, str], t: TrainingSpec) -> float:
    """Measured tokens per second per GPU: the row's own figure, or its seconds per optimizer step, each step being
    micro batch x accumulation x sequence length tokens on each GPU (the rows that say so pad every example to the
    full length). 0 when the row reports neither."""
    if r["measured_tokens_per_s"]:
        return float(r["measured_tokens_per_s"])
    step, accumulation = _SECONDS_PER_STEP_NOTE.search(r["notes"]), _ACCUMULATION_NOTE.search(r["notes"])
    if step is None or accumulation is None:
        return 0.0
    return t.micro_batch_size * int(accumulation.group(1)) * t.sequence_length / float(step.group(1))


def _model(r: dict[str, str], catalog: Catalog) -> ModelSpec:
    name = r["model"].strip()
    for candidate in (name, name.replace("NousResearch/", "meta-llama/")):
        try:
            return catalog.model(candidate)
        except SpecError:
            continue
    if not r["layers"]:
        raise NotExpressibleError("architecture not in the catalog and not given")
    heads = _int(r["heads"])
    a = Architecture(family=Family.LLAMA, num_layers=_int(r["layers"]), hidden_size=_int(r["hidden"]),
                     intermediate_size=_int(r["intermediate"]) // (2 if "qwen" in name.lower() else 1),
                     num_attention_heads=heads, num_key_value_heads=_int(r["kv_heads"] or r["heads"]),
                     vocab_size=_int(r["vocab"]), tie_word_embeddings=False)
    return ModelSpec(name=name, architecture=a, source="public_measurements.csv columns")


def _method(r: dict[str, str]) -> Method:
    method, quant = r["method"].lower(), r["quant"].lower()
    if "(" in method or "vlm" in method or "dpo" in method:
        raise NotExpressibleError(f"method {r['method']!r}: trainable embeddings, vision or DPO rows "
                                  "are not expressible here")
    if "gptq" in quant or "gptq" in method:
        raise NotExpressibleError("GPTQ-quantised base weights are not a tunefleet method")
    if method.startswith("qlora"):
        return Method.QLORA
    plain = {"full": Method.FULL, "lora": Method.LORA}
    if method.strip() not in plain:
        raise NotExpressibleError(f"method {method!r}")
    return plain[method.strip()]


def _targets(text: str) -> tuple[str, ...]:
    text = text.split("(")[0].strip()
    if not text or "default" in text or "all-linear" in text:
        return (ALL_LINEAR,)
    names: list[str] = []
    for name in (n.strip() for n in text.split(",") if n.strip()):
        names.extend(_TARGET_ALIASES.get(name, (name,)))
    return tuple(names)


def _precision(r: dict[str, str]) -> Precision:
    p = r["precision"].lower()
    if p.startswith("fp32"):
        return Precision.FP32
    if p.startswith("fp16"):
        return Precision.FP16
    # bf16 weights trained without AMP keep no fp32 master copy, unless DeepSpeed (a numeric stage) adds one
    if ("pure" in p or "torch_dtype" in p) and not r["zero_stage"].strip().isdigit():
        return Precision.BF16_PURE
    return Precision.BF16


def _zero(r: dict[str, str]) -> int:
    """The row's ZeRO stage; FSDP's FULL_SHARD on several GPUs shards parameters, gradients and optimizer states as
    ZeRO-3 does (on one GPU it shards nothing)."""
    z = r["zero_stage"].strip()
    return int(z) if z.isdigit() else 3 if _fsdp(r) else 0


def _recipe(r: dict[str, str], precision: Precision, gpus: int) -> Recipe:
    """hf-trainer for a row trained with transformers' Trainer under bf16 mixed precision, without DeepSpeed on one GPU
    or under DeepSpeed ZeRO, and without a framework's own kernels (fms-acceleration's accelerated-peft plugins);
    or under FSDP (FULL_SHARD on several GPUs); tunefleet's model for the rest (FSDP that hf-trainer's model does
    not cover as ZeRO-3, bf16 weights without autocast as bf16-pure). What the hf-trainer
    model does not cover (planner.recipes.check) falls back to tunefleet's."""
    trainer = "hf trainer" in r["optimizer"].lower() or "sft_trainer" in r["notes"].lower()
    zero = r["zero_stage"].strip()
    plain = (not zero and gpus == 1) or zero.isdigit() or _fsdp(r)
    native = "accelerated" not in r["quant"].lower()
    return Recipe.HF_TRAINER if trainer and plain and native and precision is Precision.BF16 else Recipe.TUNEFLEET


# Where a row's script loaded an unquantised model in fp32, which its row does not say: PEFT's example (examples/sft/
# utils.py, create_and_prepare_model: `torch_dtype=quant_storage_dtype ... else torch.float32`), behind the rows of
# its docs/source/accelerate pages. Under FSDP the frozen shards stay fp32; under DeepSpeed ZeRO-3 the weights are
# partitioned in the config's bf16 as they load (deepspeed.zero.Init's dtype), as the planner models a bf16 load.
FP32_LOADING_SOURCES = ("huggingface/peft docs/source/accelerate/",)


def _load_dtype(r: dict[str, str], method: Method) -> LoadDtype:
    fp32 = r["source"].startswith(FP32_LOADING_SOURCES) and not method.quantises and _fsdp(r)
    return LoadDtype.FP32 if fp32 else LoadDtype.BF16


# The transformers release behind a row where its source names it (planned through training.transformers_version):
# fms-acceleration's references ran 4.45.2 (scripts/benchmarks/refs/requirements.txt at commit 24bdadb), with
# transformers' default reentrant checkpointing; PEFT's FSDP-QLoRA section (docs/source/accelerate/fsdp.md) asks for
# transformers > 4.44.2 with accelerate >= 1.0.1 and PEFT > 0.13.0 and runs --use_reentrant True: planned on 4.45.0, the
# first release past 4.44.2 (every release before 4.52 plans alike). Its FSDP-LoRA section runs --use_reentrant False,
# which the planner does not model on those releases, so its row keeps the planner's own.
TRANSFORMERS_BY_SOURCE = (("foundation-model-stack/fms-acceleration", (Method.LORA, Method.QLORA), "4.45.2"),
                          ("huggingface/peft docs/source/accelerate/fsdp.md", (Method.QLORA,), "4.45.0"))


def _transformers_version(r: dict[str, str], method: Method) -> str:
    return next((version for source, methods, version in TRANSFORMERS_BY_SOURCE
                 if r["source"].startswith(source) and method in methods), "")


# A row whose notes give the same run's peak without offload ("same run without CPU offload: 35.6 GB/GPU")
_WITHOUT_OFFLOAD_NOTE = re.compile(r"without CPU offload: ([\d.]+) GB", re.IGNORECASE)


def without_offload(r: dict[str, str]) -> dict[str, str] | None:
    """The run a row's notes report without its offload, as a row of its own (None where they report none)."""
    m = _WITHOUT_OFFLOAD_NOTE.search(r["notes"])
    if not m or not r["offload"]:
        return None
    # a peak above the offloaded run's cards: the GPU is not stated, planned on an 80 GB one (its capacity changes the
    # headroom, not the bytes)
    return {**r, "offload": "", "measured_peak_gib_per_gpu": m.group(1), "gpu": "A100-80GB (not stated)",
            "notes": f"{r['notes']}; this case: the run without offload its notes report"}


def _ran_fsdp(r: dict[str, str]) -> bool:
    """A row that ran under FSDP, on one GPU or several."""
    return "fsdp" in r["zero_stage"].lower()


def _fsdp(r: dict[str, str]) -> bool:
    """A row sharded by FSDP (FULL_SHARD) on several GPUs."""
    return _ran_fsdp(r) and _int(r["n_gpus"] or "1") > 1


def _gpu(r: dict[str, str], catalog: Catalog) -> Hardware:
    text = r["gpu"].lower()
    for pattern, name in _GPU_PATTERNS:
        if re.search(pattern, text):
            return Hardware(gpu=catalog.gpu(name), gpus_per_node=_int(r["n_gpus"] or "1"), host_memory_bytes=2**40)
    raise NotExpressibleError(f"GPU {r['gpu']!r} not recognised")


def _figure(notes: str) -> str:
    n = notes.lower()
    if "nvml" in n or "nvidia-smi" in n or "reported" in n:
        return "nvidia-smi"
    if "max_memory_allocated" in n or "cuda_memory_max" in n or "tracemalloc" in n:
        return "allocated"
    return "unspecified (compared as nvidia-smi)"


def interpret(index: int, r: dict[str, str], catalog: Catalog) -> Case:
    if not r["measured_peak_gib_per_gpu"]:
        raise NotExpressibleError("no peak memory reported (OOM or not measured)")
    model = _model(r, catalog)
    hw = _gpu(r, catalog)
    zero = _zero(r)
    offload = r["offload"].lower()
    off = Offload.NONE if not offload or offload == "none" else (Offload.ALL if zero == 3 else Offload.OPTIMIZER)
    method = _method(r)
    if method is Method.QLORA and model.architecture.num_experts:
        # transformers 4 (every row here predates 5) kept each expert an nn.Linear, which bitsandbytes quantised;
        # transformers 5 fuses them into 3-D tensors that stay bf16, and the planner models the executor's version
        raise NotExpressibleError("QLoRA of a mixture of experts measured with per-expert linears (transformers 4); "
                                  "transformers 5 leaves the fused experts unquantised")
    try:
        t = TrainingSpec(
            method=method, micro_batch_size=_int(r["micro_batch"] or "1"), sequence_length=_int(r["seq_len"]),
            precision=_precision(r), zero_stage=zero, offload=off,
            gradient_checkpointing=r["grad_ckpt"].lower().startswith("on"),
            attention=Attention.FLASH if "flash" in r["notes"].lower() else Attention.SDPA,
            lora=LoraSpec(rank=_int(r["lora_r"] or "8"), target_modules=_targets(r["lora_targets"])))
        per_gpu_memory(model, t, hw)
    except SpecError as e:
        raise NotExpressibleError(str(e)) from e
    hf = replace(t, recipe=_recipe(r, t.precision, hw.world_size),
                 sharding=Sharding.FSDP if _fsdp(r) else Sharding.DEEPSPEED, load_dtype=_load_dtype(r, method))
    if hf.recipe is Recipe.HF_TRAINER:
        hf = replace(hf, transformers_version=_transformers_version(r, method))
    if recipes.covers(model.architecture, hf, hw.world_size):
        t = hf
    recipe = "hf-trainer " if t.recipe is Recipe.HF_TRAINER else ""
    recipe += f"transformers-{t.transformers_version} " if t.transformers_version else ""
    recipe += "fp32-loaded " if t.load_dtype is LoadDtype.FP32 else ""
    label = f"{recipe}{model.name.split('/')[-1]} {method.value} mb{t.micro_batch_size}x{t.sequence_length} " \
            f"{'ckpt ' if t.gradient_checkpointing else ''}" \
            f"{'FSDP' if t.sharding is Sharding.FSDP else f'ZeRO-{zero}'}" \
            f"{' offload' if off is not Offload.NONE else ''}" \
            f"{' (FSDP as ZeRO)' if _ran_fsdp(r) and t.sharding is not Sharding.FSDP else ''}"
    return Case(index, label, model, t, hw, _figure(r["notes"]), float(r["measured_peak_gib_per_gpu"]) * GiB,
                _tokens_per_s(r, t),
                float(m.group(1)) * GiB if (m := _ALLOCATED_NOTE.search(r["notes"])) else 0.0)


def predicted_bytes(c: Case, figure: str) -> float:
    m = per_gpu_memory(c.model, c.training, c.hardware)
    return m.allocated_bytes if figure == "allocated" else m.total_bytes


OURS_UNDER_PREDICTION_LIMIT = -0.05


def _summary(name: str, errors: list[float], limit: float | None, target: str) -> str:
    """Median and worst absolute error, and (for memory) how many rows under-predict beyond the limit."""
    if not errors:
        return f"{name}: no rows"
    absolute = [abs(e) for e in errors]
    text = f"{name}: {len(errors)} rows, median |error| {statistics.median(absolute):.1%}, worst {max(absolute):.1%}"
    if limit is not None:
        text += f", under-predictions beyond {-limit:.0%}: {sum(1 for e in errors if e < limit)}"
    return f"{text}  (target: {target})"


def _ours_planned(r: dict[str, str]) -> tuple[int, int, float]:
    """Today's planner on a measured row, with the checkpointing that was in effect (a model left in eval mode runs
    without it, whatever was asked)."""
    from benchmarks.measure_gpu import Group, _prediction

    in_effect = r.get("checkpointing_in_effect", r["gradient_checkpointing"]) == "True"
    g = Group(r["model"], r["method"], int(r["zero_stage"]), r["offload"], in_effect, r["attention"],
              int(r["lora_rank"]), gpu=r["gpu"], recipe=r.get("recipe", "tunefleet"))
    return _prediction(g, int(r["micro_batch"]), int(r["sequence_length"]))


def compare_ours() -> None:
    """Our own GPU runs (benchmarks/measure_gpu.py) against today's planner: allocated vs allocated, device-used vs
    Fit's total. Rows whose harness note says they are not comparable are listed apart."""
    files = sorted(RESULTS.glob("gpu_measurements*.csv"))
    rows = [r for f in files for r in csv.DictReader(f.open()) if r["status"] == "ok" and r["gpu"] != "cpu"]
    if not rows:
        print("\nOur GPU measurements: none yet. Run `python -m benchmarks.measure_gpu` on a CUDA machine; it writes "
              "benchmarks/results/gpu_measurements.csv, which this benchmark then compares.")
        return
    apart = [r for r in rows if r.get("harness_note", "").startswith("not comparable")]
    compared = [r for r in rows if r not in apart]
    table, allocated_errors, device_errors, time_errors = [], [], [], []
    for r in compared:
        total, allocated, step_s = _ours_planned(r)
        alloc_error = allocated / float(r["max_allocated_bytes"]) - 1
        device_error = total / float(r["device_used_bytes"]) - 1
        time_error = step_s / float(r["step_time_s"]) - 1
        allocated_errors.append(alloc_error)
        device_errors.append(device_error)
        time_errors.append(time_error)
        table.append([r.get("recipe", "tunefleet"), r["model"].split("/")[-1], r["method"], r["zero_stage"],
                      r["offload"], r.get("checkpointing_in_effect", r["gradient_checkpointing"]),
                      f"{r['micro_batch']}x{r['sequence_length']}", f"{float(r['max_allocated_bytes']) / GiB:.2f}",
                      f"{allocated / GiB:.2f}", f"{alloc_error:+.1%}",
                      f"{float(r['device_used_bytes']) / GiB:.2f}", f"{total / GiB:.2f}",
                      f"{device_error:+.1%}", f"{float(r['step_time_s']):.3f}", f"{step_s:.3f}", f"{time_error:+.0%}"])
    header = ["recipe", "model", "method", "ZeRO", "offload", "ckpt", "mb x seq", "allocated GiB", "planned", "error",
              "device GiB", "planned total", "error", "step s", "planned s", "time error"]
    print_table(f"Our GPU measurements ({rows[0].get('device_name', rows[0]['gpu'])}, torch {rows[0]['torch']}) "
                "vs today's planner (error: planned less measured, over measured)", header, table)
    target = "median <= 3 %, worst <= 10 %, none under 5 %"
    print(_summary("allocated", allocated_errors, OURS_UNDER_PREDICTION_LIMIT, target))
    print(_summary("device (nvidia-smi)", device_errors, OURS_UNDER_PREDICTION_LIMIT, target))
    print(_summary("step time", time_errors, None, "median <= 15 %"))
    for note in sorted({r["harness_note"] for r in apart}):
        print(f"Left out, {sum(r['harness_note'] == note for r in apart)} rows: {note}")
    print(f"CSV: {write_csv('accuracy_ours.csv', header, table)}")


def public_cases(catalog: Catalog) -> tuple[list[Case], list[list[object]]]:
    """Every third-party row the planner can express, the runs their notes report without offload among them, and a
    table row (index, model, method, why) for each it cannot."""
    with PUBLIC.open() as f:
        rows = list(csv.DictReader(f))
    cases: list[Case] = []
    skipped: list[list[object]] = []
    for index, row in enumerate(rows):
        for r in (row, without_offload(row)):
            if r is None:
                continue
            try:
                cases.append(interpret(index, r, catalog))
            except NotExpressibleError as e:
                skipped.append([index, r["model"][:32], r["method"][:24], str(e)[:90]])
    return cases, skipped


def main() -> None:
    from benchmarks.measure_gpu_sharded import compare as compare_rows_on_gpu

    compare_ours()
    compare_rows_on_gpu()
    cases, skipped = public_cases(default_catalog())
    table, errors, time_errors = [], [], []
    allocated_errors = []
    for c in cases:
        predicted = predicted_bytes(c, c.figure)
        error = (predicted - c.measured_bytes) / c.measured_bytes
        errors.append(error)
        allocated = ""
        if c.measured_allocated_bytes:
            measured_allocated = c.measured_allocated_bytes
            allocated_error = (predicted_bytes(c, "allocated") - measured_allocated) / measured_allocated
            allocated_errors.append(allocated_error)
            allocated = f"{c.measured_allocated_bytes / GiB:.1f} ({allocated_error:+.0%})"
        tokens = ""
        if c.measured_tokens_per_s:
            st = step_time(c.model, c.training, c.hardware)
            ours = st.tokens_per_s / c.hardware.world_size  # HF's train_tokens_per_second is per device
            time_error = (ours - c.measured_tokens_per_s) / c.measured_tokens_per_s
            time_errors.append(time_error)
            tokens = f"{c.measured_tokens_per_s:,.0f} / {ours:,.0f} ({time_error:+.0%})"
        table.append([c.row, c.label, f"{c.hardware.world_size}x {c.hardware.gpu.name}", c.figure,
                      f"{c.measured_bytes / GiB:.1f}", f"{predicted / GiB:.1f}", f"{error:+.1%}", allocated, tokens])
    header = ["row", "configuration", "GPUs", "measured figure", "measured GiB", "predicted GiB", "error",
              "allocated GiB (error)", "tokens/s per GPU measured / predicted"]
    print_table("Third-party measurements (benchmarks/data/public_measurements.csv) vs planner", header, table)
    print(_summary("\nmemory", errors, UNDER_PREDICTION_LIMIT, "median <= 6 %, none under 10 %"))
    print(_summary("  the same rows' max_memory_allocated, where reported", allocated_errors, UNDER_PREDICTION_LIMIT,
                   "like for like with the allocated part of Fit"))
    # the planner models DeepSpeed's ZeRO and hf-trainer's FSDP, and reads the FSDP it does not model as ZeRO; the rows
    # that ran no FSDP apart
    print(_summary("  of the memory rows, those that did not run FSDP", [e for c, e in zip(cases, errors, strict=True)
                                                       if "FSDP" not in c.label], UNDER_PREDICTION_LIMIT,
                   "as memory"))
    if time_errors:
        print(_summary("throughput", time_errors, None, "median <= 10 %"))
    print_table("Rows the planner cannot express", ["row", "model", "method", "why"], skipped)
    print(f"CSV: {write_csv('accuracy_public.csv', header, table)}")


if __name__ == "__main__":
    main()

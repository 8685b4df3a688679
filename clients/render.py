"""Human tables and JSON for CLI output. JSON keeps proto field names and prints 64-bit
integers as numbers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from tunefleet.v1 import model_pb2, plan_pb2, planner_pb2, training_pb2

from common.units import GiB, gib

_INT_TYPES = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_INT32,
              FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_FIXED64}



def _fsdp(t: training_pb2.TrainingSpec) -> bool:
    return t.sharding == training_pb2.SHARDING_FSDP


def loading_peaks(g: plan_pb2.MemoryBreakdown) -> bool:
    """Whether loading, not a step, sets the total (MemoryBreakdown.loading_bytes)."""
    return g.loading_bytes > 0 and g.loading_bytes + g.cuda_workspace_bytes + g.cuda_context_bytes >= g.total_bytes


def _layout(t: training_pb2.TrainingSpec) -> str:
    """How the plan shards: FSDP's FULL_SHARD, or DeepSpeed's ZeRO stage."""
    return "FSDP" if _fsdp(t) else f"ZeRO {t.zero_stage}"

def _enum_name(names: Any, value: int) -> str | int:
    return names[value].name if value in names else value


def to_dict(msg: Message) -> dict[str, Any]:
    """Every field (set or default), by proto name; enums by name; int64 as JSON numbers."""
    out: dict[str, Any] = {}
    for fd in msg.DESCRIPTOR.fields:
        value = getattr(msg, fd.name)
        if fd.message_type is not None and not fd.is_repeated:
            if fd.message_type.full_name == "google.protobuf.Timestamp":
                out[fd.name] = value.ToJsonString() if msg.HasField(fd.name) else None
            elif fd.containing_oneof is None or msg.HasField(fd.name):
                out[fd.name] = to_dict(value)
        elif fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            value_field = fd.message_type.fields_by_name["value"]
            out[fd.name] = {k: to_dict(v) if value_field.message_type is not None else v for k, v in value.items()}
        elif fd.message_type is not None:
            out[fd.name] = [to_dict(v) for v in value]
        elif fd.enum_type is not None:
            names = fd.enum_type.values_by_number
            out[fd.name] = [_enum_name(names, v) for v in value] if fd.is_repeated else _enum_name(names, value)
        elif fd.containing_oneof is not None and not msg.HasField(fd.name):
            continue
        else:
            out[fd.name] = list(value) if fd.is_repeated else value
    return out


def dumps(msg: Message) -> str:
    return json.dumps(to_dict(msg), indent=2)


def dumps_line(msg: Message) -> str:
    """One message as one line of JSON (JSON Lines, for streams a script reads line by line)."""
    return json.dumps(to_dict(msg), separators=(",", ":"))



def table(rows: Sequence[tuple[str, ...]], header: tuple[str, ...]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(tuple("-" * w for w in widths)), *(line(r) for r in rows)])


def fit_text(r: plan_pb2.FitResult) -> str:
    g, hw, t = r.per_gpu, r.hardware, r.training
    verdict = ("FITS (tight)" if r.tight else "FITS") if r.fits else "DOES NOT FIT"
    head = (f"{verdict}: {r.model.name} ({r.model.parameter_count / 1e9:,.2f}B params, "
            f"{r.trainable_parameter_count / 1e6:,.1f}M trainable) on {hw.gpus_per_node * hw.nodes}x "
            f"{hw.gpu.display_name}{f' [{hw.flavor}]' if hw.flavor else ''}\n"
            + (f"serving {t.micro_batch_size} sequence(s) of {t.sequence_length:,} tokens (weights, KV cache, prefill)"
               if r.inference else
               f"method {training_pb2.Method.Name(t.method).removeprefix('METHOD_').lower()}, "
               f"micro-batch {t.micro_batch_size} x seq {t.sequence_length}, {_layout(t)}, "
               f"grad-ckpt {'on' if t.gradient_checkpointing else 'off'}"))
    rows = [("weights", gib(g.weights_bytes)),
            *([(f"  gathered by {'FSDP' if _fsdp(t) else 'ZeRO-3'} (forward, backward)",
                gib(g.gathered_parameters_bytes))]
              if g.gathered_parameters_bytes else []),
            *([("  experts gathered again (backward)", gib(g.regathered_experts_bytes))]
              if g.regathered_experts_bytes else []),
            ("adapters", gib(g.adapter_bytes)),
            ("gradients", gib(g.gradients_bytes)), ("optimizer states", gib(g.optimizer_bytes)),
            ("activations", gib(g.activations_bytes)), ("  of which logits/loss", gib(g.logits_bytes)),
            *([("optimizer step (after backward)", gib(g.optimizer_step_bytes))] if g.optimizer_step_bytes else []),
            ("DeepSpeed buffers", gib(g.deepspeed_buffers_bytes)), ("cuBLAS workspace", gib(g.cuda_workspace_bytes)),
            ("CUDA context, libraries", gib(g.cuda_context_bytes)),
            ("allocator slack", gib(g.allocator_bytes)),
            *([("loading, before the first step: the peak", gib(g.loading_bytes))] if loading_peaks(g) else []),
            ("total per GPU", gib(g.total_bytes)),
            ("  likely range", f"{gib(r.total_low_bytes)} - {gib(r.total_high_bytes)}"),
            *([("margin asked for", f"{r.margin_fraction:.0%} of the total")] if r.margin_fraction else []),
            ("GPU capacity", gib(r.capacity_bytes)), ("headroom", gib(r.headroom_bytes)),
            ("host RAM per node", f"{gib(r.host.total_bytes)} of {gib(r.host.capacity_bytes)}"),
            ("largest batch" if r.inference else "largest micro-batch", str(r.max_micro_batch))]
    text = head + "\n\n" + table(rows, ("per-GPU memory", "bytes"))
    text += f"\nrange: {r.band_basis}"
    if r.calibrated:
        text += f"\nprobability it fits: {r.fit_probability:.0%} (the share of those runs whose error it would survive)"
    for note in r.notes:
        text += f"\nnote: {note}"
    if r.suggestions:
        text += "\n\nTo make it fit:\n" + "\n".join(
            f"  - {s.change}: {gib(s.per_gpu_total_bytes)} per GPU{'' if s.fits else ' (still too big)'} — {s.reason}"
            for s in r.suggestions)
    return text


def _hours(s: float) -> str:
    return f"{s / 3600:,.2f} h"


def estimate_text(r: planner_pb2.EstimateResponse) -> str:
    e = r.estimate
    rows = [("steps", f"{e.total_steps:,}"), ("tokens", f"{e.total_tokens:,}"),
            ("step time", f"{e.step_time_s:,.3f} s"), ("throughput", f"{e.tokens_per_s:,.0f} tokens/s"),
            ("model FLOP/s utilisation", f"{e.model_flops_utilization:.0%}"),
            ("wall time", f"{_hours(e.duration_s)} (range {_hours(e.duration_s_low)} - {_hours(e.duration_s_high)})"),
            ("GPU-hours", f"{e.gpu_hours:,.2f}"),
            ("price", f"${e.hourly_usd:,.2f}/h for the job's GPUs" if e.priced else "no price on record"),
            ("cost", f"${e.cost_usd:,.2f} (range ${e.cost_usd_low:,.2f} - ${e.cost_usd_high:,.2f})" if e.priced
             else "unknown: pass --price-per-hour (0 for a free tier)")]
    return fit_text(r.fit) + "\n\n" + table(rows, ("estimate", "value"))


def recommend_text(r: planner_pb2.RecommendResponse) -> str:
    if not r.candidates:
        return "No configuration fits the constraints.\n\n" + rejections_text(r, 15)
    rows = []
    for i, c in enumerate(r.candidates, 1):
        hw, t, e = c.fit.hardware, c.training, c.estimate
        rows.append((str(i), f"{hw.gpus_per_node * hw.nodes}x {hw.gpu.name}" + (f" [{hw.flavor}]" if hw.flavor else ""),
                     _layout(t) + ("" if t.offload <= training_pb2.OFFLOAD_NONE else "+offload"),
                     "on" if t.gradient_checkpointing else "off", str(t.micro_batch_size),
                     gib(c.fit.per_gpu.total_bytes) + (" TIGHT" if c.fit.tight else ""), _hours(e.duration_s),
                     f"${e.cost_usd:,.2f}", "*" if c.pareto_optimal else ""))
    text = table(rows, ("#", "hardware", "layout", "ckpt", "mb", "per GPU", "time", "cost", "pareto"))
    if any(c.fit.tight for c in r.candidates):
        text += ("\n\nTIGHT: fits as predicted, but the likely peak passes the GPU's memory (tunefleet fit shows the "
                 "range); ranked after safe options unless --allow-tight")
    text += f"\n\nevaluated {r.evaluated_count} configurations; plan {r.plan.plan_id} is ready (--json for the plan)"
    return text + "\n\n" + rejections_text(r, 8)


def rejections_text(r: planner_pb2.RecommendResponse, limit: int) -> str:
    reasons = planner_pb2.RejectionReason
    rows = [(f"{x.gpu_count}x {x.gpu}", reasons.Name(x.reason).removeprefix("REJECTION_REASON_").lower(), x.detail)
            for x in r.rejections if x.reason != planner_pb2.REJECTION_REASON_NO_PRICE][:limit]
    no_price = sum(1 for x in r.rejections if x.reason == planner_pb2.REJECTION_REASON_NO_PRICE)
    text = f"Rejected (first {len(rows)}):\n" + table(rows, ("hardware", "reason", "detail")) if rows else ""
    if no_price:
        text += f"\n{no_price} options have no price on record (pass --price-per-hour with --gpu to plan on them)"
    return text


def hardware_text(r: planner_pb2.ListHardwareResponse) -> str:
    rows = [(g.name, g.display_name, gib(g.memory_bytes), f"{g.marketed_memory_bytes / GiB:,.0f} GB",
             f"{g.bf16_flops_per_s / 1e12:,.0f}" if g.supports_bf16
             else f"{g.fp16_flops_per_s / 1e12:,.0f} (fp16)", f"{g.memory_bandwidth_bytes_per_s / 1e9:,.0f}",
             f"${g.on_demand_hourly_usd:.2f}" if g.on_demand_hourly_usd else "-", g.spec_source,
             g.price_source or "-") for g in r.gpus]
    text = table(rows, ("gpu", "name", "usable memory", "on the box", "bf16 TFLOP/s", "GB/s", "$/GPU-h",
                        "spec source", "price source"))
    frows = [(f.name, f.provider, f"{f.gpu_count}x {f.gpu}" if f.gpu_count else "no GPU", gib(f.host_memory_bytes),
              f"${f.hourly_usd:.2f}", f.price_source) for f in r.flavors]
    return text + "\n\n" + table(frows, ("flavor", "provider", "gpus", "host RAM", "$/h", "price source"))


def models_text(r: planner_pb2.ListModelsResponse) -> str:
    rows = [(m.name, model_pb2.ModelFamily.Name(m.architecture.family).removeprefix("MODEL_FAMILY_").lower(),
             f"{m.parameter_count / 1e9:,.2f}B", str(m.architecture.num_layers), str(m.architecture.hidden_size))
            for m in r.models]
    return table(rows, ("model", "family", "params", "layers", "hidden"))

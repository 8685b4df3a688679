"""What the pages show, from the services' protobuf answers: pure functions, no I/O. Sizes read as the CLI writes
them (common.units), phases and priorities by the CLI's names (clients.fleet_render), so a page and a terminal
agree word for word."""

from __future__ import annotations

import json
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp
from tunefleet.v1 import executor_pb2, plan_pb2, progress_pb2, training_pb2

from clients.fleet_render import expected_start, phase_name, priority_name
from clients.render import loading_peaks
from common.units import size

TERMINAL = frozenset({progress_pb2.PHASE_DONE, progress_pb2.PHASE_FAILED, progress_pb2.PHASE_CANCELLED})
RUNNING = frozenset({progress_pb2.PHASE_LOADING, progress_pb2.PHASE_PREFLIGHT, progress_pb2.PHASE_TRAINING,
                     progress_pb2.PHASE_CHECKPOINTING})
# The phases a Jobs filter offers, in a job's order of life.
PHASES = tuple(phase_name(p) for p in progress_pb2.Phase.values() if p != progress_pb2.PHASE_UNSPECIFIED)


def script_json(value: object) -> str:
    """JSON to embed in a page's <script type="application/json">: no '<' can close the element early."""
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c")


def phase_value(name: str) -> int | None:
    """'training' -> PHASE_TRAINING; None for '' or an unknown name."""
    return progress_pb2.Phase.Value(f"PHASE_{name.upper()}") if name in PHASES else None


def stamp(ts: Timestamp) -> str:
    """UTC, to the second; '' when unset."""
    return ts.ToDatetime().strftime("%Y-%m-%d %H:%M:%S") if ts.seconds or ts.nanos else ""


def duration(seconds: float) -> str:
    if seconds <= 0:
        return "-"
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def usd(amount: float) -> str:
    return f"${amount:,.2f}"


def method_name(method: int) -> str:
    return training_pb2.Method.Name(method).removeprefix("METHOD_").lower().replace("_", "-")


@dataclass(frozen=True)
class JobRow:
    job_id: str
    phase: str
    team: str
    gpu_class: str
    priority: str
    step: str
    loss: str
    tokens_per_s: str
    eta: str  # a running job's remaining time, a queued job's expected start
    cost: str
    submitted: str


def job_row(job: executor_pb2.Job) -> JobRow:
    e = job.last_event
    if job.phase == progress_pb2.PHASE_QUEUED:
        eta = expected_start(job)
    elif job.phase in RUNNING:
        eta = duration(e.eta_s)
    else:
        eta = "-"
    spent = (job.spent_usd or 0.0) + job.open_hold_usd  # charged holds and the one running now
    cost = f"{usd(spent)} of ≤{usd(job.cost_high_usd)}" if job.cost_high_usd else (usd(spent) if spent else "-")
    return JobRow(job.job_id, phase_name(job.phase), job.team or "-", job.gpu_class, priority_name(job.priority),
                  f"{e.step}/{e.total_steps}" if e.total_steps else "-", f"{e.loss:.4f}" if has_metrics(e) else "-",
                  f"{e.tokens_per_s:,.0f}" if e.tokens_per_s else "-", eta, cost, stamp(job.submitted_at))


def plan_words(plan: plan_pb2.Plan) -> list[str]:
    """The plan in sentences: what trains, how, on what, and what the planner predicted."""
    t, hw, p = plan.training, plan.hardware, plan.prediction
    model = plan.model.catalog_name or plan.model.weights or "a model from its config.json"
    lines = [f"{method_name(t.method)} of {model}"
             + (f" (LoRA rank {t.lora.rank})" if t.lora.rank else "")
             + f", micro-batch {t.micro_batch_size} × {t.sequence_length:,} tokens, gradient accumulation "
               f"{max(t.gradient_accumulation_steps, 1)}, ZeRO {t.zero_stage}, gradient checkpointing "
               f"{'on' if t.gradient_checkpointing else 'off'}",
             f"on {hw.gpus_per_node or 1} × {hw.gpu or hw.flavor or 'any GPU'} per node, {hw.nodes or 1} node(s)"]
    data = plan.dataset.local_path or plan.dataset.hub_name
    if data:
        lines.append(f"data {data}, output {plan.output_uri or '-'}")
    if p.HasField("fit"):
        f = p.fit
        lines.append(f"predicted peak {size(f.per_gpu.total_bytes)} per GPU (likely {size(f.total_low_bytes)} – "
                     f"{size(f.total_high_bytes)}) of {size(f.capacity_bytes)}")
    if p.HasField("estimate") and p.estimate.duration_s:
        e = p.estimate
        steps = f"{e.total_steps:,} steps of {e.step_time_s:.3f} s, " if e.total_steps and e.step_time_s else ""
        lines.append(f"predicted {steps}{duration(e.duration_s)} "
                     f"({duration(e.duration_s_low)} – {duration(e.duration_s_high)})"
                     + (f", {usd(e.cost_usd)} ({usd(e.cost_usd_low)} – {usd(e.cost_usd_high)})" if e.priced else ""))
    return lines


@dataclass(frozen=True)
class Segment:
    name: str
    bytes: int
    percent: float  # of the bar's scale
    css: str  # the series class: the same colour wherever the term appears


def breakdown(fit: plan_pb2.FitResult) -> tuple[list[Segment], float, float, float]:
    """The per-GPU peak as stacked segments that sum to its total, on a scale of the larger of the GPU's capacity and
    the range's top; and where the capacity and the range's two ends fall on it (percent). Where loading is the peak,
    its segments are the whole model as it loads and what is outside PyTorch's allocator."""
    g = fit.per_gpu
    scale = max(fit.capacity_bytes, fit.total_high_bytes, g.total_bytes, 1)
    marks = (100.0 * fit.capacity_bytes / scale, 100.0 * fit.total_low_bytes / scale,
             100.0 * fit.total_high_bytes / scale)
    if loading_peaks(g):  # the whole model as it loads, before the first step (MemoryBreakdown.loading_bytes)
        loading = [("loading: the whole model", g.loading_bytes, "s-weights"),
                   ("cuBLAS workspace", g.cuda_workspace_bytes, "s-buffers"),
                   ("CUDA context, libraries", g.cuda_context_bytes, "s-context")]
        return [Segment(name, b, 100.0 * b / scale, css) for name, b, css in loading if b], *marks
    # The peak's terms (plan.proto's MemoryBreakdown.total_bytes): resident ones, then the larger of backward
    # (activations, ZeRO-3's gathered copies) and the optimizer step; what is left of the total is that larger
    # transient under ZeRO 2-3's kept gradient partition.
    resident = [("weights", g.weights_bytes, "s-weights"), ("adapters", g.adapter_bytes, "s-adapters"),
                ("optimizer states", g.optimizer_bytes, "s-optimizer"),
                ("DeepSpeed buffers", g.deepspeed_buffers_bytes, "s-buffers"),
                ("cuBLAS workspace", g.cuda_workspace_bytes, "s-buffers"),
                ("CUDA context, libraries", g.cuda_context_bytes, "s-context"),
                ("allocator slack", g.allocator_bytes, "s-slack")]
    used = sum(b for _, b, _ in resident)
    peak_transient = max(0, g.total_bytes - used)
    backward = g.activations_bytes + g.gathered_parameters_bytes + g.regathered_experts_bytes
    if backward >= g.optimizer_step_bytes:
        transient = [("gradients", min(g.gradients_bytes, peak_transient), "s-gradients"),
                     ("activations", peak_transient - min(g.gradients_bytes, peak_transient), "s-activations")]
    else:
        transient = [("optimizer step", peak_transient, "s-step")]
    return [Segment(name, b, 100.0 * b / scale, css) for name, b, css in resident + transient if b], *marks


def has_metrics(e: progress_pb2.ProgressEvent) -> bool:
    """Whether the event carries a step's metrics (loss, learning rate, tokens/s): a training event. Checkpoint, done
    and other events carry a step but no metrics (their zeros are no measurement)."""
    return e.phase == progress_pb2.PHASE_TRAINING and e.step > 0


def event_json(e: progress_pb2.ProgressEvent) -> dict[str, object]:
    """One progress event as the job page's charts and log read it."""
    return {"sequence": e.sequence, "metric": has_metrics(e), "time_s": e.time.ToMilliseconds() / 1000,
            "time": stamp(e.time), "phase": phase_name(e.phase), "step": e.step, "total_steps": e.total_steps,
            "loss": e.loss,
            "learning_rate": e.learning_rate, "tokens_per_s": e.tokens_per_s,
            "peak_memory_bytes": e.peak_gpu_memory_bytes or e.peak_host_memory_bytes,
            "memory_kind": "GPU" if e.peak_gpu_memory_bytes else "host", "eta": duration(e.eta_s),
            "message": e.message, "checkpoint": e.checkpoint_path,
            "stored_step": e.stored_checkpoint.step, "stored": e.stored_checkpoint.uri}


def job_facts(job: executor_pb2.Job) -> dict[str, object]:
    """The job page's header as it stands now (the page fetches it again whenever the phase changes)."""
    row = job_row(job)
    waiting = job.phase == progress_pb2.PHASE_QUEUED
    return {"phase": phase_name(job.phase), "host": job.host_id or "-", "step": row.step,
            "eta": f"starts {expected_start(job)}" if waiting else row.eta, "cost": row.cost,
            "waiting": job.pending_reason if waiting else ""}


def job_json(job: executor_pb2.Job) -> dict[str, object]:
    """What the job page's script needs besides the events: the plan's memory prediction and its band."""
    fit = job.plan.prediction.fit
    return {"job_id": job.job_id, "phase": phase_name(job.phase), "terminal": job.phase in TERMINAL,
            "predicted_peak_bytes": fit.per_gpu.total_bytes, "predicted_low_bytes": fit.total_low_bytes,
            "predicted_high_bytes": fit.total_high_bytes}


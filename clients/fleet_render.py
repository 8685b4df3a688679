"""Human output of the fleet commands: job and fleet tables, the Feedback table, and Watch's live progress."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from google.protobuf.timestamp_pb2 import Timestamp
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from tunefleet.v1 import executor_pb2, progress_pb2

from clients.render import gib, table
from contract.progress import describe


def phase_name(phase: int) -> str:
    return progress_pb2.Phase.Name(phase).removeprefix("PHASE_").lower()


def priority_name(priority: int) -> str:
    return executor_pb2.Priority.Name(priority).removeprefix("PRIORITY_").lower()


def _ago(job: executor_pb2.Job) -> str:
    return job.submitted_at.ToDatetime().strftime("%Y-%m-%d %H:%M:%S") if job.HasField("submitted_at") else ""


def jobs_text(jobs: Iterable[executor_pb2.Job]) -> str:
    rows = [(j.job_id, phase_name(j.phase), j.team or "-", j.queue, j.host_id or "-",
             f"{j.last_event.step}/{j.last_event.total_steps}" if j.last_event.total_steps else "-", _ago(j),
             (j.error or j.last_event.message).splitlines()[0][:60] if (j.error or j.last_event.message) else "")
            for j in jobs]
    if not rows:
        return "no jobs"
    return table(rows, ("job", "phase", "team", "queue", "host", "step", "submitted (UTC)", "last message"))


def _usage_rows(r: executor_pb2.UsageResponse, grouped: str = ",") -> list[tuple[str, ...]]:
    """Hours and dollars with two decimals; `grouped` "," for thousands in a table, "" for CSV."""
    def f(value: float) -> str:
        return f"{value:{grouped}.2f}"
    return [(row.key, f(row.gpu_seconds / 3600), f(row.useful_gpu_seconds / 3600), f(row.lost_gpu_seconds / 3600),
             f(row.cost_usd), str(row.holds)) for row in [*r.rows, r.total]]


def usage_text(r: executor_pb2.UsageResponse, by: str) -> str:
    if not r.rows:
        return "no charged GPU time in that period"
    text = table(_usage_rows(r), (by, "GPU-hours", "useful", "lost", "cost USD", "holds"))
    if r.month_budget_usd:
        text += (f"\n\nthis month: spent ${r.month_spent_usd:,.2f} + committed ${r.month_committed_usd:,.2f} of a "
                 f"${r.month_budget_usd:,.2f} budget")
    return text


def usage_csv(r: executor_pb2.UsageResponse, by: str) -> str:
    """CSV with a header; keys (job ids, teams, classes, days) hold no comma or quote (their rules say so)."""
    header = (by, "gpu_hours", "useful_gpu_hours", "lost_gpu_hours", "cost_usd", "holds")
    return "\n".join(",".join(row) for row in [header, *_usage_rows(r, grouped="")])


def audit_text(entries: Iterable[executor_pb2.AuditEntry]) -> str:
    rows = [(e.time.ToDatetime().strftime("%Y-%m-%d %H:%M:%S"), e.principal, e.team, e.role, e.action, e.target,
             " ".join(e.detail.split())) for e in entries]  # whole: a cut detail hides who was charged or why
    if not rows:
        return "no audit entries"
    return table(rows, ("time (UTC)", "principal", "team", "role", "action", "target", "detail"))


def _error(measured: float, predicted: float) -> str:
    return f"{(measured - predicted) / predicted:+.1%}" if predicted and measured else "-"


def feedback_text(jobs: Iterable[executor_pb2.Job]) -> str:
    rows = []
    for j in jobs:
        f = j.feedback
        rows.append((j.job_id, gib(f.predicted_peak_gpu_memory_bytes) if f.predicted_peak_gpu_memory_bytes else "-",
                     gib(f.measured_peak_gpu_memory_bytes) if f.measured_peak_gpu_memory_bytes else "- (no GPU)",
                     _error(f.measured_peak_gpu_memory_bytes, f.predicted_peak_gpu_memory_bytes),
                     f"{f.predicted_step_time_s:.3f}" if f.predicted_step_time_s else "-",
                     f"{f.measured_step_time_s:.3f}", _error(f.measured_step_time_s, f.predicted_step_time_s),
                     f"{f.predicted_communication_time_s:.3f}" if f.predicted_communication_time_s else "-",
                     f"{f.world_size} on {f.nodes}" if f.world_size else "-", f"{f.measured_tokens_per_s:,.0f}",
                     f"${j.cost_high_usd:,.2f}" if j.cost_high_usd else "-",
                     f"${j.spent_usd:,.2f}" if j.gpu_seconds else "-"))
    if not rows:
        return "no finished jobs with feedback"
    return table(rows, ("job", "predicted peak GPU", "measured peak GPU", "error", "predicted step s",
                        "measured step s", "error", "of it comm s", "ranks on nodes", "measured tok/s",
                        "cost: predicted up to", "measured"))


def _in(stamp: Timestamp, now_s: float) -> str:
    seconds = max(0.0, stamp.ToMilliseconds() / 1000 - now_s)
    if seconds < 60:
        return "now" if seconds < 1 else f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def expected_start(job: executor_pb2.PendingJob | executor_pb2.Job) -> str:
    """"in 12 min (5 min - 20 min)", or "-" when the fleet cannot tell (no host of the class)."""
    if not job.HasField("expected_start"):
        return "-"
    now_s = time.time()
    mid = _in(job.expected_start, now_s)
    text = mid if mid == "now" else f"in {mid}"
    low, high = _in(job.expected_start_earliest, now_s), _in(job.expected_start_latest, now_s)
    if (low, high) != (mid, mid):
        text += f" ({low} - {high})"
    return ("at least " if job.expected_start_is_lower_bound else "") + text


def alternatives_text(job: executor_pb2.Job) -> str:
    """'waiting for a100-80gb: starts in 40 min, then ~1.2 h, ~$7.10' and each class that would start it now."""
    if job.phase != progress_pb2.PHASE_QUEUED:
        return f"job {job.job_id} is {phase_name(job.phase)}: only a queued job moves"
    gpu_class = job.gpu_class
    e = job.plan.prediction.estimate
    own = f"~{e.duration_s / 3600:.1f} h, ~${e.cost_usd:,.2f}" if e.duration_s else "no prediction"
    lines = [f"waiting for {gpu_class}: starts {expected_start(job)}, then {own}"]
    for alt in job.runs_now_instead:
        lines.append(f"starts now on {alt.gpus_per_node}x {alt.gpu_class}: ~{alt.duration_s / 3600:.1f} h, "
                     f"~${alt.cost_usd:,.2f}  (tunefleet move {job.job_id} --gpu-class {alt.gpu_class})")
    if not job.runs_now_instead:
        lines.append("no other class has an idle host that fits it now")
    return "\n".join(lines)


def calibration_text(calibrations: dict[str, Any], path: Path) -> str:
    rows = []
    for gpu_class, cal in calibrations.items():
        memory = cal.memory_runs
        ratios = [r.allocated_ratio for r in memory]
        slacks = [r.slack for r in memory]
        step = cal.step_time_ratio
        rows.append((gpu_class, str(len(cal.runs)), str(len(memory)),
                     f"x{min(ratios):.3f}-{max(ratios):.3f}" if ratios else "-",
                     f"{min(slacks):.0%}-{max(slacks):.0%}" if slacks else "-", f"x{step:.2f}" if step else "-"))
    if not rows:
        return f"no finished job with Feedback yet; wrote an empty calibration to {path}"
    text = table(rows, ("GPU class", "runs", "measured memory", "allocated vs plan", "allocator slack",
                        "step time vs plan"))
    return text + f"\n\nwrote {path}; plan with it: tunefleet fit ... --calibration {path}"


def _health(h: executor_pb2.Host) -> str:
    if not h.quarantine_reason:
        return "ok"
    since = h.quarantined_at.ToDatetime().strftime("%Y-%m-%d %H:%M")
    return f"QUARANTINED since {since} UTC: {h.quarantine_reason} (tunefleet host clear {h.host_id})"


def running_text(h: executor_pb2.Host) -> str:
    """What a host runs, as the caller may read it: its job's id, or another team's job by its team only."""
    if h.running_job_id:
        return h.running_job_id
    return f"a job of team {h.running_team}" if h.running_team else "idle"


def fleet_text(f: executor_pb2.FleetResponse) -> str:
    hosts = [(h.host_id, h.gpu_class, str(h.gpu_count), gib(h.gpu_memory_bytes) if h.gpu_memory_bytes else "-",
              running_text(h), _health(h)) for h in f.hosts]
    parts = [table(hosts, ("host", "class", "GPUs", "GPU memory", "running", "health")) if hosts
             else "no registered hosts"]
    queues = [(q.queue, str(q.depth)) for q in f.queues]
    parts.append(table(queues, ("queue", "waiting")) if queues else "no queues yet")
    pending = [(p.job_id, p.team or "-", p.queue, str(p.position) if p.position else "-", expected_start(p),
                p.reason) for p in f.pending]
    if pending:
        parts.append(table(pending, ("pending job", "team", "queue", "place", "expected start", "why it waits")))
    teams = [(t.team or "-", t.gpu_class, str(t.held_gpus), str(t.quota_gpus),
              "none" if t.limit_gpus < 0 else str(t.limit_gpus), f"{t.weight:g}", f"{t.usage_gpu_hours:,.2f}")
             for t in f.teams]
    if teams:
        parts.append(table(teams, ("team", "class", "GPUs held", "quota", "limit", "weight", "recent GPU-h")))
    policy = f.policy
    exempt = f" (none that has run under {policy.preempt_min_runtime_s:g} s)" \
        if policy.preemption and policy.preempt_min_runtime_s else ""
    exempt += f"; a victim has {policy.preempt_checkpoint_s:g} s to checkpoint" \
        if policy.preemption and policy.preempt_checkpoint_s else ""
    parts.append(f"policy: preemption {'on' if policy.preemption else 'off'}{exempt}; a lost host's job is retried up "
                 f"to {policy.retry_limit} time(s), first after {policy.retry_backoff_s:g} s")
    return "\n\n".join(parts)


def _memory(e: progress_pb2.ProgressEvent, predicted_bytes: int) -> str:
    if e.peak_gpu_memory_bytes:
        vs = f" / {gib(predicted_bytes)} planned" if predicted_bytes else ""
        return f"gpu {gib(e.peak_gpu_memory_bytes)}{vs}"
    if e.peak_host_memory_bytes:
        return f"host {gib(e.peak_host_memory_bytes)}"
    return ""


def follow(responses: Iterator[executor_pb2.WatchResponse], predicted_bytes: int = 0,
           out: TextIO = sys.stdout) -> progress_pb2.ProgressEvent:
    """Show a Watch: a live bar on a terminal (step/total, loss, tokens/s, ETA, peak memory vs planned), one
    line per event otherwise. Returns the last event."""
    last = progress_pb2.ProgressEvent()
    if not out.isatty():
        for r in responses:
            if r.HasField("history_trimmed"):
                print(f"[history trimmed: events before {r.history_trimmed.first_available_sequence} are gone]",
                      file=out, flush=True)
            elif r.HasField("event"):
                last = r.event
                print(describe(r.event), file=out, flush=True)
        return last
    console = Console(file=out)
    columns = (TextColumn("{task.fields[phase]:<13}", markup=False), BarColumn(), MofNCompleteColumn(),
               TextColumn("loss {task.fields[loss]}", markup=False), TextColumn("{task.fields[speed]}", markup=False),
               TextColumn("eta {task.fields[eta]}", markup=False), TextColumn("{task.fields[memory]}", markup=False),
               TextColumn("{task.fields[checkpoint]}", markup=False), TextColumn("{task.fields[stored]}", markup=False),
               TimeElapsedColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("job", total=None, phase="waiting", loss="-", speed="", eta="-", memory="", checkpoint="",
                            stored="")
        for r in responses:
            if r.HasField("history_trimmed"):
                bar.console.print(f"history trimmed: events before {r.history_trimmed.first_available_sequence} "
                                  "are gone", markup=False, highlight=False)
                continue
            if not r.HasField("event"):
                continue
            e = last = r.event
            if e.message and e.phase != progress_pb2.PHASE_CHECKPOINTING:  # a checkpoint shows in its column
                bar.console.print(f"[{phase_name(e.phase)}] {e.message}", markup=False, highlight=False)
            fields: dict[str, object] = {"phase": phase_name(e.phase), "completed": e.step}
            if e.total_steps:
                fields["total"] = e.total_steps
            if e.loss:
                fields["loss"] = f"{e.loss:.4f}"
            if e.tokens_per_s:
                fields["speed"] = f"{e.tokens_per_s:,.0f} tok/s"
            if e.phase == progress_pb2.PHASE_TRAINING:
                fields["eta"] = f"{e.eta_s:,.0f}s"
            elif e.phase in (progress_pb2.PHASE_DONE, progress_pb2.PHASE_FAILED, progress_pb2.PHASE_CANCELLED):
                fields["eta"] = "-"
            if memory := _memory(e, predicted_bytes):
                fields["memory"] = memory
            if e.checkpoint_path:
                fields["checkpoint"] = f"ckpt @ {e.step}"  # written on the host
            if e.HasField("stored_checkpoint"):
                fields["stored"] = f"stored @ {e.stored_checkpoint.step}"  # sealed in the object store
            bar.update(task, **fields)  # type: ignore[arg-type]
    return last

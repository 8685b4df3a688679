"""The fleet half of the `tunefleet` command: submit, watch, jobs, cancel, fleet, host, audit, usage, move, calibrate
(ExecutorService over gRPC), and worker (run a worker on this host)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from tunefleet.v1 import executor_pb2, plan_pb2, progress_pb2

from clients import connection, fleet_render, render
from clients.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    TunefleetError,
    Unauthenticated,
    Unavailable,
)
from clients.executor_client import ExecutorClient
from common import exit_status

DEFAULT_EXECUTOR = "127.0.0.1:50052"
PRIORITIES = {"high": executor_pb2.PRIORITY_HIGH, "normal": executor_pb2.PRIORITY_NORMAL,
              "low": executor_pb2.PRIORITY_LOW}
PHASES = {fleet_render.phase_name(v): v for v in progress_pb2.Phase.values() if v}
COMMANDS = ("submit", "watch", "jobs", "cancel", "fleet", "host", "audit", "usage", "move", "calibrate")
USAGE_GROUPS = {"job": executor_pb2.USAGE_GROUPING_JOB, "team": executor_pb2.USAGE_GROUPING_TEAM,
                "class": executor_pb2.USAGE_GROUPING_GPU_CLASS, "day": executor_pb2.USAGE_GROUPING_DAY}
_OUTCOME = {progress_pb2.PHASE_DONE: exit_status.OK, progress_pb2.PHASE_FAILED: exit_status.FAILED,
            progress_pb2.PHASE_CANCELLED: exit_status.CANCELLED}


def days(text: str) -> int:
    """'30' or '30d' -> 30."""
    number = text.strip().lower().removesuffix("d")
    if not number.isdigit() or not 0 < int(number) <= 400:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of days from 1 to 400; write e.g. 30 or 30d")
    return int(number)


def _add_executor_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("executor")
    g.add_argument("--executor", default=os.environ.get("TUNEFLEET_EXECUTOR", DEFAULT_EXECUTOR),
                   help="executor service host:port (env TUNEFLEET_EXECUTOR; default %(default)s)")
    connection.add_arguments(g)
    g.add_argument("--json", action="store_true", help="print JSON instead of tables")


def add_commands(sub: argparse._SubParsersAction) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    s = sub.add_parser("submit", help="queue a plan on the fleet", formatter_class=fmt, epilog=exit_status.HELP,
                       description="Queue a plan (from 'tunefleet recommend --save-plan FILE') on the queue of its "
                                   "GPU class. The job id is the plan id: submitting the same plan again returns "
                                   "the same job.")
    s.add_argument("plan", type=Path, nargs="?", help="plan file (JSON or binary tunefleet.v1.Plan)")
    s.add_argument("--priority", choices=PRIORITIES, default="normal", help="queue tier (default %(default)s)")
    s.add_argument("--watch", action="store_true", help="then follow the job to its end, as 'tunefleet watch'")
    s.add_argument("--override-budget", action="store_true",
                   help="admins: queue it even past its team's monthly budget (audited; name the team with --team)")
    s.add_argument("--team", default="",
                   help="admins: the team the job belongs to and is charged to (a team of the fleet's auth file; "
                        "default: your own team)")
    _add_executor_args(s)
    s.add_argument("--from-recommend", nargs=argparse.REMAINDER, metavar="RECOMMEND-OPTIONS",
                   help="instead of a plan file: submit the best option of 'tunefleet recommend RECOMMEND-OPTIONS' "
                        "(last on the line, e.g. --from-recommend --model M --method lora --tokens 5M --dataset "
                        "d.jsonl)")
    w = sub.add_parser("watch", help="follow a job's progress live", formatter_class=fmt, epilog=exit_status.HELP,
                       description="Replay a job's events, then follow them live to the end with a progress bar "
                                   "(one line per event when not on a terminal). A dropped connection is resumed "
                                   "from the last event seen.")
    w.add_argument("job_id")
    w.add_argument("--after", type=int, default=0, help="only events after this sequence number")
    _add_executor_args(w)
    j = sub.add_parser("jobs", help="list the fleet's jobs, newest first", formatter_class=fmt, epilog=exit_status.HELP)
    j.add_argument("--phase", action="append", choices=PHASES, default=[], help="only these phases (repeatable)")
    j.add_argument("--gpu-class", default="", help="only jobs for this GPU class")
    j.add_argument("--limit", type=int, default=50, help="at most this many (0: all; default %(default)s)")
    j.add_argument("--feedback", action="store_true",
                   help="finished jobs' measured vs predicted memory and speed (with --json: for calibration)")
    _add_executor_args(j)
    c = sub.add_parser("cancel", help="cancel a queued or running job (checkpoints are kept)", formatter_class=fmt,
                       epilog=exit_status.HELP)
    c.add_argument("job_id")
    c.add_argument("--reason", default="", help="recorded with the job")
    _add_executor_args(c)
    f = sub.add_parser("fleet", help="hosts, queue depths and why pending jobs wait", formatter_class=fmt,
                       epilog=exit_status.HELP)
    f.add_argument("--gpu-class", default="")
    _add_executor_args(f)
    h = sub.add_parser("host", help="a host's quarantine: 'tunefleet host clear HOST' lets it take work again",
                       formatter_class=fmt, epilog=exit_status.HELP,
                       description="A worker that finds its GPUs sick (a critical XID, uncorrectable ECC errors, "
                                   "retired pages pending, a GPU lost) quarantines its host: it takes no new job, "
                                   "and its running job checkpoints and is requeued. 'tunefleet fleet' shows why. "
                                   "Once the host is repaired (a GPU reset, a reboot, a replaced card), clear it.")
    h.add_argument("action", choices=["clear"])
    h.add_argument("host_id", help="the host's id, as 'tunefleet fleet' lists it")
    _add_executor_args(h)
    a = sub.add_parser("audit", help="who submitted, cancelled and cleared what (admins)", formatter_class=fmt,
                       epilog=exit_status.HELP,
                       description="The fleet's audit log, newest last: every Submit, Cancel and ClearHost with the "
                                   "principal, its team and role.")
    a.add_argument("--limit", type=int, default=100, help="the newest this many entries (default %(default)s)")
    _add_executor_args(a)
    k = sub.add_parser("calibrate", help="the planner's error on this fleet's GPUs, from its finished runs",
                       formatter_class=fmt, epilog=exit_status.HELP,
                       description="Read every finished job's Feedback (predicted vs measured peak memory and step "
                                   "time) and write, per GPU class, what the planner cannot simulate: how far the "
                                   "allocated peak landed from the prediction, the allocator's slack, the step time "
                                   "against the prediction. Give the file to the planner (--calibration FILE, or "
                                   "'serve planner --calibration FILE'): with 5 or more runs of a class, Fit's range "
                                   "comes from them and says so, with the probability that the job fits.")
    k.add_argument("--out", type=Path, required=True, help="the calibration file to write")
    _add_executor_args(k)
    m = sub.add_parser("move", help="where a queued job would start now, and re-plan it for that GPU class",
                       formatter_class=fmt, epilog=exit_status.HELP,
                       description="Without --gpu-class: when the job is expected to start on its own class, and "
                                   "the planner's answer on each class with an idle host now (it would start at "
                                   "once). With --gpu-class: re-plan it for that class (the planner's cheapest fit "
                                   "on one of its hosts) and queue it there; its data, output and hyperparameters "
                                   "stay. Only a job that never wrote a checkpoint moves.")
    m.add_argument("job_id")
    m.add_argument("--gpu-class", default="", help="the class to move it to")
    _add_executor_args(m)
    u = sub.add_parser("usage", help="measured GPU time and what it cost, by job, team, class or day",
                       formatter_class=fmt, epilog=exit_status.HELP,
                       description="Every hold of a host by a job is charged when it ends: GPU-seconds x the job's "
                                   "price per GPU-hour, split into useful and lost (a failed run; steps run again "
                                   "after a lost host or a hand-back). Your team's, or with --team any team's "
                                   "(admins; admins see every team by default).")
    u.add_argument("--team", default="", help="only this team")
    u.add_argument("--since", type=days, default=30, metavar="DAYS", help="holds that ended in the last DAYS days, "
                   "e.g. 30 or 30d (default %(default)s)")
    u.add_argument("--by", choices=USAGE_GROUPS, default="job", help="group by (default %(default)s)")
    u.add_argument("--csv", action="store_true", help="CSV instead of a table")
    _add_executor_args(u)


def _read_plan(path: Path) -> plan_pb2.Plan:
    from contract.run_config import parse_plan  # pure: no torch

    if not path.is_file():
        raise SystemExit(f"error: plan file {path} does not exist; write one with "
                         "'tunefleet recommend ... --save-plan FILE'")
    return parse_plan(path.read_bytes(), str(path))


def _watch(client: ExecutorClient, job_id: str, after: int, as_json: bool) -> int:
    predicted = client.get(job_id).plan.prediction.fit.per_gpu.total_bytes
    if as_json:
        last = progress_pb2.ProgressEvent()
        for r in client.watch(job_id, after):
            if r.HasField("event"):
                last = r.event
            print(render.dumps_line(r), flush=True)  # JSON Lines: one response a line
    else:
        last = fleet_render.follow(client.watch(job_id, after), predicted)
    if not as_json and last.phase != progress_pb2.PHASE_DONE:
        print(f"job {job_id} {fleet_render.phase_name(last.phase)}: {last.message}", file=sys.stderr)
    return _OUTCOME.get(last.phase, exit_status.FAILED)


PlanSource = Callable[[list[str]], plan_pb2.Plan]


def _plan_to_submit(a: argparse.Namespace, recommended: PlanSource) -> plan_pb2.Plan:
    from contract.errors import PlanError

    if (a.plan is None) == (a.from_recommend is None):
        raise SystemExit("error: give a plan file, or --from-recommend with the options of 'tunefleet recommend'")
    if a.from_recommend is not None:
        plan = recommended(a.from_recommend)
        if not a.json:
            print(f"recommended: {plan.hardware.gpus_per_node}x {plan.hardware.gpu or plan.hardware.flavor}, "
                  f"{render.gib(plan.prediction.fit.per_gpu.total_bytes)} per GPU, "
                  f"${plan.prediction.estimate.cost_usd:,.2f} predicted")
        return plan
    try:
        return _read_plan(a.plan)
    except PlanError as e:
        raise SystemExit(f"error: {e}") from None


def _run(a: argparse.Namespace, client: ExecutorClient, recommended: PlanSource) -> int:
    if a.command == "submit":
        plan = _plan_to_submit(a, recommended)
        r = client.submit(plan, PRIORITIES[a.priority], override_budget=a.override_budget, team=a.team)
        if a.json and not a.watch:
            print(render.dumps(r))
        elif not a.json:
            print(f"{'queued' if r.created else 'already submitted'}: job {r.job.job_id} on {r.job.queue} "
                  f"({fleet_render.phase_name(r.job.phase)}); follow it with: tunefleet watch {r.job.job_id}")
        return _watch(client, r.job.job_id, 0, a.json) if a.watch else exit_status.OK
    if a.command == "watch":
        return _watch(client, a.job_id, a.after, a.json)
    if a.command == "jobs":
        phases = [PHASES[p] for p in a.phase]
        if a.feedback:
            phases = [progress_pb2.PHASE_DONE]
        jobs = list(client.jobs(phases, a.gpu_class, a.limit))
        if a.feedback:
            jobs = [j for j in jobs if j.HasField("feedback")]
            print(json.dumps([{"job_id": j.job_id, "gpu_class": j.gpu_class,
                                      "feedback": render.to_dict(j.feedback)} for j in jobs], indent=1)
                  if a.json else fleet_render.feedback_text(jobs))
        else:
            print(json.dumps([render.to_dict(j) for j in jobs], indent=1) if a.json
                  else fleet_render.jobs_text(jobs))
        return exit_status.OK
    if a.command == "cancel":
        job = client.cancel(a.job_id, a.reason)
        print(render.dumps(job) if a.json else
              f"job {job.job_id}: {fleet_render.phase_name(job.phase)}"
              + ("" if job.phase == progress_pb2.PHASE_CANCELLED else " (cancel requested; the worker stops it "
                                                                       "within a second)"))
        return exit_status.OK
    if a.command == "calibrate":
        from planner import calibration  # the CLI's in-process planner is a dependency already

        done = list(client.jobs([progress_pb2.PHASE_DONE]))
        samples = [(j.gpu_class, calibration.run_of(
            j.feedback.predicted_peak_gpu_memory_bytes, j.feedback.measured_peak_gpu_memory_bytes,
            j.feedback.measured_peak_gpu_reserved_bytes, j.feedback.predicted_step_time_s,
            j.feedback.measured_step_time_s, j.feedback.predicted_allocated_gpu_memory_bytes))
            for j in reversed(done) if j.HasField("feedback")]
        calibrations = calibration.calibrate(samples)
        calibration.save(calibrations, a.out)
        print(json.dumps({c: len(cal.runs) for c, cal in calibrations.items()}) if a.json
              else fleet_render.calibration_text(calibrations, a.out))
        return exit_status.OK
    if a.command == "move":
        if a.gpu_class:
            moved = client.move(a.job_id, a.gpu_class)
            print(render.dumps(moved) if a.json else f"job {moved.job_id} on {moved.queue}: {moved.last_event.message}")
            return exit_status.OK
        job = client.get(a.job_id)
        print(render.dumps(job) if a.json else fleet_render.alternatives_text(job))
        return exit_status.OK
    if a.command == "usage":
        report = client.usage(a.team, a.since, USAGE_GROUPS[a.by])
        print(render.dumps(report) if a.json else fleet_render.usage_csv(report, a.by) if a.csv
              else fleet_render.usage_text(report, a.by))
        return exit_status.OK
    if a.command == "audit":
        entries = client.audit(a.limit)
        print(json.dumps([render.to_dict(e) for e in entries], indent=1) if a.json
              else fleet_render.audit_text(entries))
        return exit_status.OK
    if a.command == "host":
        reason = client.clear_host(a.host_id)
        print(json.dumps({"host_id": a.host_id, "cleared": reason}) if a.json else
              f"host {a.host_id} cleared (it was quarantined: {reason}); it takes work again at its next heartbeat")
        return exit_status.OK
    fleet = client.fleet(a.gpu_class)
    print(render.dumps(fleet) if a.json else fleet_render.fleet_text(fleet))
    return exit_status.OK


def main(a: argparse.Namespace, recommended: PlanSource) -> int:
    """Run a fleet command; `recommended` turns recommend options into a plan (submit --from-recommend)."""
    try:
        c = connection.from_arguments(a, a.executor)
        with ExecutorClient(a.executor, token=c.token, tls_ca=c.tls_ca, tls_server_name=c.tls_server_name) as client:
            return _run(a, client, recommended)
    except InvalidArgument as exc:
        for v in exc.violations or []:
            print(f"error: {v.field}: {v.description}", file=sys.stderr)
        if not exc.violations:
            print(f"error: {exc}", file=sys.stderr)
        return exit_status.BAD_INPUT
    except NotFound as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_status.NOT_FOUND
    except FailedPrecondition as exc:  # over the team's budget, a host that cannot run it
        print(f"error: {exc}", file=sys.stderr)
        return exit_status.REFUSED
    except PermissionDenied as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_status.DENIED
    except Unauthenticated:
        print(f"error: the executor at {a.executor} does not know this caller: "
              f"{'no token was given' if not c.token else 'it does not accept the token given'}; pass your token "
              "with --token, the TUNEFLEET_TOKEN environment variable or --token-file FILE (an admin issues it)",
              file=sys.stderr)
        return exit_status.UNAUTHENTICATED
    except Unavailable as exc:
        print(f"error: executor at {a.executor} is unavailable ({exc}); start it with 'tunefleet serve executor' "
              "or pass --executor host:port", file=sys.stderr)
        return exit_status.UNAVAILABLE
    except TunefleetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_status.FAILED
    except KeyboardInterrupt:
        return exit_status.INTERRUPTED_BY_USER
    except SystemExit as exc:  # a message about the command line: what to change
        if not isinstance(exc.code, str):
            raise
        print(exc.code, file=sys.stderr)
        return exit_status.BAD_INPUT

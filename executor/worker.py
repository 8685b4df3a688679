"""The fleet worker: registers its host, takes jobs from its GPU class's queues and runs each through the
training launcher as a child process group.

The worker process never imports torch nor touches CUDA (GPUs are read through NVML); the launcher and its
ranks run in their own session, so one signal to the group stops the whole tree. The worker, not the
launcher, ends a job for fleet reasons: Cancel, the job's timeout, and the worker's own shutdown each
interrupt the launcher (ranks stop, checkpoints stay) and the worker records CANCELLED, FAILED, or QUEUED
again (requeued at the front of its queue, to resume from its last checkpoint).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import structlog
from google.protobuf import json_format
from tunefleet.v1 import plan_pb2, progress_pb2

from common.log import configure_logging
from executor import job_queue
from executor.events import EventLog, RedisProgressSink
from executor.hosts import CPU_CLASS, HEARTBEAT_INTERVAL_S, HostGpus, HostRegistry, default_host_id, detect_gpus
from executor.progress import TERMINAL_PHASES, ProgressTail, log_tail, new_event
from executor.store import JobStore
from executor.training.command import DEFAULT_PROGRESS_INTERVAL_S
from planner.catalog import default_catalog

log = structlog.get_logger("executor.worker")
SUPERVISE_POLL_S = 0.2  # how often a running job checks for Cancel, shutdown, timeout and new events
STOP_GRACE_S = 60.0  # after an interrupt, how long the tree gets to stop before it is killed
LOG_TAIL_LINES = 20
DEFAULT_WORK_DIR = Path("runs")


@dataclass
class Outcome:
    """How a job's run ended, as the worker records it."""

    phase: int
    message: str = ""
    requeue: bool = False


@dataclass
class WorkerRuntime:
    redis_url: str
    host_id: str
    gpus: HostGpus
    work_dir: Path
    progress_interval_s: float = DEFAULT_PROGRESS_INTERVAL_S
    stopping: threading.Event = field(default_factory=threading.Event)
    running_job_id: str = ""

    def __post_init__(self) -> None:
        self.redis = redis.Redis.from_url(self.redis_url)
        self.store = JobStore(self.redis)
        self.events = EventLog(self.redis)
        self.registry = HostRegistry(self.redis)
        self.queues = job_queue.class_queue_names(self.gpus.gpu_class)

    def heartbeat(self) -> None:
        self.registry.heartbeat(self.host_id, self.gpus, self.running_job_id, self.queues)

    def output_dir(self, output_uri: str, job_id: str) -> Path:
        uri = output_uri.removeprefix("file://") or job_id
        path = Path(uri)
        return (path if path.is_absolute() else self.work_dir / path).resolve()

    def run(self, job_id: str) -> dict[str, Any]:
        claimed = self.store.claim(job_id, self.host_id)
        if claimed != "ok":
            log.info("job.skipped", job_id=job_id, reason=claimed)
            return {"job_id": job_id, "skipped": claimed}
        self.running_job_id = job_id
        self.heartbeat()
        try:
            return self._run_claimed(job_id)
        except Exception as e:
            log.exception("job.worker_error", job_id=job_id)
            self._fail_quietly(job_id, f"the worker on host {self.host_id} failed while running the job: "
                                       f"{type(e).__name__}: {e}")
            raise
        finally:
            self.running_job_id = ""
            self.heartbeat()

    def _run_claimed(self, job_id: str) -> dict[str, Any]:
        structlog.contextvars.bind_contextvars(job_id=job_id)
        record = self.store.raw(job_id)  # read once: the plan, its queue and its timeout
        plan = plan_pb2.Plan.FromString(record[b"plan"])
        queue, timeout_s = record[b"queue"].decode(), int(record.get(b"timeout_s") or 0)
        out = self.output_dir(plan.output_uri, job_id)
        (out / "logs").mkdir(parents=True, exist_ok=True)
        plan_path = out / "plan.json"
        plan_path.write_text(json_format.MessageToJson(plan))
        self.store.update(job_id, output_dir=str(out), log_path=str(out / "logs" / "train.log"))
        try:
            self._emit(out, progress_pb2.ProgressEvent(
                job_id=job_id, phase=progress_pb2.PHASE_LOADING,
                message=f"host {self.host_id} ({self.gpus.gpu_class}, {self.gpus.gpu_count} GPU(s)) took the job; "
                        f"output {out}"))
            wanted = plan.hardware.gpus_per_node or 1
            if self.gpus.gpu_class != CPU_CLASS and wanted > self.gpus.gpu_count:
                outcome = Outcome(progress_pb2.PHASE_FAILED,
                                  f"the plan needs {wanted} GPUs per node; host {self.host_id} has "
                                  f"{self.gpus.gpu_count}. Re-plan with hardware.gpus_per_node <= "
                                  f"{self.gpus.gpu_count}, or run a worker on a bigger host of this class")
            else:
                outcome = self._supervise(job_id, plan_path, out, timeout_s or job_queue.DEFAULT_JOB_TIMEOUT_S)
            last = self._finish(job_id, out, outcome, queue, timeout_s)
        finally:
            structlog.contextvars.unbind_contextvars("job_id")
        return {"job_id": job_id, "phase": progress_pb2.Phase.Name(last.phase), "step": last.step}

    def _launch(self, plan_path: Path, out: Path) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "executor.training", str(plan_path), "--output", str(out),
                   "--redis-url", self.redis_url, "--progress-interval-s", str(self.progress_interval_s)]
        with (out / "logs" / "launcher.log").open("ab") as launcher_log:
            return subprocess.Popen(command, stdout=launcher_log, stderr=subprocess.STDOUT, start_new_session=True,
                                    env=dict(os.environ, PYTHONUNBUFFERED="1"))

    def _supervise(self, job_id: str, plan_path: Path, out: Path, timeout_s: int) -> Outcome:
        """Run the launcher to its end; interrupt it for Cancel, the job's timeout or this worker's shutdown."""
        tail = ProgressTail(out / "progress.jsonl")
        tail.read_new()
        proc = self._launch(plan_path, out)
        deadline = time.monotonic() + timeout_s
        reason: Outcome | None = None
        interrupted_at = 0.0
        try:
            while True:
                try:
                    proc.wait(timeout=SUPERVISE_POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    pass
                for event in tail.read_new():  # backfill anything rank 0 could not publish
                    self._publish_quietly(event)
                if reason is None:
                    reason = self._stop_reason(job_id, deadline, timeout_s, out)
                    if reason is not None:
                        log.info("job.interrupting", reason=reason.message)
                        proc.send_signal(signal.SIGUSR1)
                        interrupted_at = time.monotonic()
                elif time.monotonic() - interrupted_at > STOP_GRACE_S:
                    _kill_group(proc.pid)
        finally:
            _kill_group(proc.pid)  # no rank may outlive its launcher
            proc.wait()
        for event in tail.read_new():
            self._publish_quietly(event)
        if reason is not None:
            return reason
        last = self._last_event(job_id)
        if last.phase in TERMINAL_PHASES:
            return Outcome(last.phase, last.message)
        return Outcome(progress_pb2.PHASE_FAILED, f"the launcher exited with status {proc.returncode} before the run "
                                                  f"ended; its last lines ({out / 'logs' / 'launcher.log'}):\n"
                                                  f"{log_tail(out / 'logs' / 'launcher.log', LOG_TAIL_LINES)}")

    def _stop_reason(self, job_id: str, deadline: float, timeout_s: int, out: Path) -> Outcome | None:
        why = self.store.cancel_request(job_id)
        if why is not None:
            return Outcome(progress_pb2.PHASE_CANCELLED,
                           f"cancelled{': ' + why if why else ''}; checkpoints kept in {out / 'checkpoints'}")
        if self.stopping.is_set():
            return Outcome(progress_pb2.PHASE_QUEUED, f"host {self.host_id} is shutting down; requeued to resume from "
                                                      "its last checkpoint", requeue=True)
        if time.monotonic() > deadline:
            return Outcome(progress_pb2.PHASE_FAILED, f"ran past its timeout of {timeout_s} s (predicted duration × "
                                                      f"{job_queue.JOB_TIMEOUT_MARGIN:g} + "
                                                      f"{job_queue.JOB_TIMEOUT_STARTUP_S} s); checkpoints kept in "
                                                      f"{out / 'checkpoints'}")
        return None

    def _fail_quietly(self, job_id: str, message: str) -> None:
        """Record FAILED after an unexpected worker error, so the job does not look alive forever."""
        try:
            last = self._last_event(job_id)
            if last.phase in TERMINAL_PHASES:
                return
            self.events.publish(new_event(job_id, last.sequence + 1, progress_pb2.PHASE_FAILED, step=last.step,
                                          total_steps=last.total_steps, message=message))
            self.store.update(job_id, error=message)
        except (redis.RedisError, KeyError) as e:
            log.warning("job.fail_record_failed", error=str(e))

    def _publish_quietly(self, event: progress_pb2.ProgressEvent) -> None:
        try:
            self.events.publish(event)
        except (redis.RedisError, KeyError) as e:
            log.warning("events.backfill_failed", sequence=event.sequence, error=str(e))

    def _last_event(self, job_id: str) -> progress_pb2.ProgressEvent:
        return self.store.get(job_id, with_plan=False).last_event

    def _emit(self, out: Path, event: progress_pb2.ProgressEvent) -> progress_pb2.ProgressEvent:
        """One event of the worker's own into progress.jsonl and the stream, numbered after everything before it
        (the sink is opened afresh: the launcher and its ranks write between the worker's events)."""
        sink = RedisProgressSink(self.redis_url, out / "progress.jsonl", event.job_id)
        try:
            return sink.emit(event)
        finally:
            sink.close()

    def _finish(self, job_id: str, out: Path, outcome: Outcome, queue: str,
                timeout_s: int) -> progress_pb2.ProgressEvent:
        last = self._last_event(job_id)
        if last.phase != outcome.phase or last.phase not in TERMINAL_PHASES:
            last = self._emit(out, progress_pb2.ProgressEvent(
                job_id=job_id, phase=outcome.phase, step=last.step,
                total_steps=last.total_steps, message=outcome.message))
        fields: dict[str, str | int | bytes] = {}
        if outcome.phase == progress_pb2.PHASE_FAILED:
            fields["error"] = outcome.message
        summary = out / "summary.json"
        if outcome.phase == progress_pb2.PHASE_DONE and summary.is_file():  # a run whose DONE was backfilled
            feedback = json_format.ParseDict(json.loads(summary.read_text())["feedback"], progress_pb2.Feedback())
            fields["feedback"] = feedback.SerializeToString()
        if outcome.requeue:
            fields.update(host_id="", started_at_ms=0)
        if fields:
            self.store.update(job_id, **fields)
        if outcome.requeue:
            job_queue.JobQueues(self.redis).enqueue(job_id, queue, timeout_s, at_front=True)
        log.info("job.finished", phase=progress_pb2.Phase.Name(last.phase), step=last.step)
        return last


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


_runtime: WorkerRuntime | None = None


def execute(job_id: str) -> dict[str, Any]:
    """The rq job function (executor.job_queue.JOB_FUNCTION): run one job on this worker's host."""
    if _runtime is None:
        raise RuntimeError("executor.worker.execute runs inside 'tunefleet worker' only")
    return _runtime.run(job_id)


def _heartbeats(runtime: WorkerRuntime, done: threading.Event) -> None:
    while not done.wait(HEARTBEAT_INTERVAL_S):
        try:
            runtime.heartbeat()
        except redis.RedisError as e:
            log.warning("worker.heartbeat_failed", error=str(e))


DESCRIPTION = """\
Run a fleet worker on this host: register it (GPU class from NVML, or 'cpu' without GPUs), take jobs from
the queues tunefleet.<class>.high, .normal and .low (in that order), and run each with DeepSpeed through
'tunefleet train'. Relative output paths of plans land under --work-dir.

SIGTERM or Ctrl-C stops the worker: a running job is interrupted (its checkpoints stay) and requeued at the
front of its queue, to resume on the next worker of its class."""


def main(argv: list[str] | None = None) -> int:
    global _runtime
    p = argparse.ArgumentParser(prog="tunefleet worker", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--redis", default=os.environ.get("TUNEFLEET_REDIS", "redis://127.0.0.1:6379/0"),
                   help="Redis URL of the fleet (env TUNEFLEET_REDIS; default %(default)s)")
    p.add_argument("--gpu-class", help="serve this class instead of the one NVML reports (e.g. cpu)")
    p.add_argument("--host-id", default=default_host_id(), help="this host's id in the fleet (default %(default)s)")
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR,
                   help="where plans with a relative output path write (default %(default)s)")
    p.add_argument("--progress-interval-s", type=float, default=DEFAULT_PROGRESS_INTERVAL_S,
                   help="seconds between training progress events (default %(default)s)")
    p.add_argument("--burst", action="store_true", help="exit when the queues are empty")
    args = p.parse_args(argv)
    configure_logging()
    gpus = detect_gpus(default_catalog())
    if args.gpu_class:
        gpus = HostGpus(args.gpu_class, gpus.gpu_count, gpus.gpu_memory_bytes, gpus.device_name)
    runtime = WorkerRuntime(args.redis, args.host_id, gpus, args.work_dir.resolve(), args.progress_interval_s)
    try:
        runtime.heartbeat()
    except redis.RedisError as e:
        print(f"tunefleet worker: cannot reach Redis at {args.redis} ({e}); start redis-server or pass --redis URL",
              file=sys.stderr)
        return 3
    _runtime = runtime
    done = threading.Event()
    beats = threading.Thread(target=_heartbeats, args=(runtime, done), daemon=True)
    beats.start()
    log.info("worker.started", host_id=runtime.host_id, gpu_class=gpus.gpu_class, gpus=gpus.gpu_count,
             queues=runtime.queues, work_dir=str(runtime.work_dir))
    try:
        job_queue.work(runtime.redis, runtime.queues, runtime.host_id, on_shutdown=runtime.stopping.set,
                       burst=args.burst)
    finally:
        done.set()
        runtime.registry.remove(runtime.host_id)
        log.info("worker.stopped", host_id=runtime.host_id)
    return 0


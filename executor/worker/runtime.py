"""The fleet worker: registers its host, takes jobs from its GPU class's queues and runs each through the
training launcher as a child process group.

The worker process never imports torch nor touches CUDA (GPUs are read through NVML); the launcher and its ranks
run in their own session, so one signal to the group stops the whole tree. The worker, not the launcher, ends a
job for fleet reasons: Cancel and the job's timeout interrupt the launcher at once (ranks stop, checkpoints stay)
and the worker records CANCELLED or FAILED; its own shutdown (drain) and a preemption ask the ranks to checkpoint
first (the STOP file), then the job is QUEUED again at the front of its queue, to resume from that checkpoint; a
hung run (watchdog) and one out of memory (replan) go back to their queue too.

A claimed job is held under a lease with a fencing token (fleet.leases), renewed while the job runs; a worker whose
lease was lost, or that cannot renew it for long enough, stops its run and writes nothing more into the job. Each
worker also sweeps the fleet (fleet.recovery) with its heartbeat. How a run ended: executor.worker.supervision."""

from __future__ import annotations

import secrets
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import redis
import structlog
from google.protobuf import json_format
from tunefleet.v1 import plan_pb2, progress_pb2

from common.net import listen_port
from contract.errors import LeaseLostError, PlanError
from contract.gpu_class import CPU_CLASS
from contract.liveness import heartbeat_path
from contract.paths import Roots
from contract.progress import DEFAULT_PROGRESS_INTERVAL_S, TERMINAL_PHASES, log_tail
from contract.rendezvous import Rendezvous
from contract.run_config import DEFAULT_KEEP_CHECKPOINTS, launcher_log_path, stop_path
from contract.store import run_environment
from executor.worker import gpu_health, holder
from executor.worker.control import Held, JobControl, adopt_hand_back
from executor.worker.gang_lead import GangLead, wait_for_gang
from executor.worker.gang_member import Member
from executor.worker.launching import Launch, Launcher, start_training
from executor.worker.placement import Place
from executor.worker.publisher import Publisher
from executor.worker.replan import after_out_of_memory
from executor.worker.supervision import (
    LOG_TAIL_LINES,
    STOP_GRACE_S,
    Finished,
    LeaseLost,
    Outcome,
    Requeue,
    RetryLater,
    Stop,
    kill_group,
    while_running,
)
from executor.worker.watchdog import HangPolicy, hung
from fleet import queues
from fleet.connection import HOLDER_RETRY, connect
from fleet.durability import NotReplicatedError
from fleet.events import EventLog
from fleet.gangs import DEFAULT_GANG_TIMEOUT_S, DUMPING, GANG_MARKER, RUNNING, STOPPING, Gang, GangView, ticket_id
from fleet.hosts import HostGpus, HostRegistry
from fleet.jobs import JobStore, now_ms
from fleet.leases import LEASE_TTL_S, FenceGuard, Leases
from fleet.ledger import charge_ended
from fleet.record import JobRecord
from fleet.recovery import Sweeper, give_back_unconfirmed, release_held, requeue_held

log = structlog.get_logger("executor.worker.runtime")
# A drain or preemption lets the ranks finish their step and write a checkpoint for this long before the run
# is interrupted without one (keep the pod's termination grace period above it).
DEFAULT_DRAIN_GRACE_S = 300.0
# After a run ends, how long the worker keeps trying to publish events Redis missed (a Redis restart); what is
# still missing after that stays in progress.jsonl.
BACKFILL_AFTER_END_S = 120.0
DEFAULT_WORK_DIR = Path("runs")


@dataclass(frozen=True)
class Attempt:
    """One run of a held job on this host, as its supervision sees it."""

    held: Held
    plan_path: Path
    out: Path
    timeout_s: int
    lead: GangLead | None = None  # this host leads the job's gang (node 0)


@dataclass
class WorkerRuntime:
    redis_url: str
    host_id: str
    gpus: HostGpus
    work_dir: Path
    roots: Roots  # where plans may read and write (default in main: the work dir)
    team_roots: bool = False  # each team's jobs use only <root>/teams/<team> of each root (executor.worker.placement)
    progress_interval_s: float = DEFAULT_PROGRESS_INTERVAL_S
    lease_ttl_s: float = LEASE_TTL_S
    drain_grace_s: float = DEFAULT_DRAIN_GRACE_S
    work_dir_shared: bool = False
    checkpoint_store: str = ""  # an object store runs keep checkpoints in too (contract.store); "" for none
    store_keep: int = DEFAULT_KEEP_CHECKPOINTS  # the sealed checkpoints a job keeps there
    address: str = "127.0.0.1"  # where the other nodes of a gang reach this host (the rendezvous, collectives)
    gang_timeout_s: float = DEFAULT_GANG_TIMEOUT_S
    hang: HangPolicy = field(default_factory=HangPolicy)
    gpu_health: gpu_health.Source | None = None  # NVML's readings of this host's GPUs; None on a CPU host
    launcher: Launcher = start_training  # how a run's process tree starts (executor.worker.launching)
    stopping: threading.Event = field(default_factory=threading.Event)
    running_job_id: str = ""
    place: Place = field(init=False)  # where the job now held reads and writes (set as it is taken)

    def __post_init__(self) -> None:
        self.place = Place(self.roots, self.work_dir)
        self.redis = connect(self.redis_url)
        self.holder_redis = connect(self.redis_url, HOLDER_RETRY)
        self.store = JobStore(self.redis)
        self.events = EventLog(self.redis)
        self.registry = HostRegistry(self.redis)
        self.leases = Leases(self.redis, self.lease_ttl_s)
        self.health = gpu_health.HostHealth(self.gpu_health, self.registry, self.host_id)
        self.control = JobControl(self.store, self.leases, self.host_id, self.lease_ttl_s, self.stopping,
                                  lambda: self.health.reason)
        self.sweeper = Sweeper(self.redis)
        self.queues = [q.name for q in queues.QueueRef.of_class(self.gpus.gpu_class)]
        self.job_queues = queues.JobQueues(self.redis)

    def heartbeat(self) -> None:
        self.registry.heartbeat(self.host_id, self.gpus, self.running_job_id, self.queues, self.work_dir,
                                self.work_dir_shared, self.checkpoint_store)

    def _take_place(self, record: JobRecord) -> None:
        """Where the job now held reads and writes (executor.worker.placement): its part of roots and store."""
        self.place = Place.of(self.roots, self.work_dir, self.team_roots, record, self.checkpoint_store)

    def run(self, job_id: str) -> dict[str, Any]:
        try:
            claimed = self.leases.claim(job_id, self.host_id, now_ms(), progress_pb2.PHASE_QUEUED,
                                        progress_pb2.PHASE_LOADING)
        except NotReplicatedError as e:  # a fence a failover could erase: no run starts on it
            give_back_unconfirmed(self.redis, job_id, e.replies[0] if e.replies else None, self.host_id)
            return {"job_id": job_id, "skipped": "claim not replicated"}
        if isinstance(claimed, str):
            reason = claimed if claimed == "missing" else progress_pb2.Phase.Name(int(claimed))
            log.info("job.skipped", job_id=job_id, reason=reason)
            return {"job_id": job_id, "skipped": reason}
        held = Held(job_id, claimed, time.monotonic())
        if self.health.reason is not None:  # taken from the queue while the check quarantined this host
            requeue_held(self.redis, job_id, claimed, f"host {self.host_id} is quarantined ({self.health.reason}); "
                                                      "gave the job back to its queue")
            return {"job_id": job_id, "quarantined": self.health.reason}
        self.running_job_id = job_id
        self.heartbeat()
        try:
            return self._run_claimed(held)
        except LeaseLostError as e:
            log.warning("job.lease_lost", job_id=job_id, error=str(e))
            return {"job_id": job_id, "lease_lost": True}
        except Exception as e:
            log.exception("job.worker_error", job_id=job_id)
            self._fail_quietly(held, f"the worker on host {self.host_id} failed while running the job: "
                                     f"{type(e).__name__}: {e}")
            raise
        finally:
            self.running_job_id = ""
            self.heartbeat()

    def _run_claimed(self, held: Held) -> dict[str, Any]:
        job_id = held.job_id
        structlog.contextvars.bind_contextvars(job_id=job_id, fence=held.fence)
        record = self.store.record(job_id)  # read once: the plan and its timeout
        plan = plan_pb2.Plan.FromString(record.plan)
        plan.plan_id = job_id  # the run's identity is the fleet's id of the job (its team's scope: executor.service)
        timeout_s = record.timeout_s
        try:
            self._take_place(record)
            out = self.place.output_dir(plan, job_id, (self.work_dir, *self.roots.output))
        except PlanError as e:
            self._fail_quietly(held, f"refused on host {self.host_id}: {e}")
            return {"job_id": job_id, "phase": progress_pb2.Phase.Name(progress_pb2.PHASE_FAILED), "step": 0}
        (out / "logs").mkdir(parents=True, exist_ok=True)
        held.publisher = Publisher(self.events, out / "progress.jsonl", out / "summary.json", job_id, held.fence)
        held.publisher.adopt()
        plan_path = out / "plan.json"
        plan_path.write_text(json_format.MessageToJson(plan))
        self.store.record_output(job_id, held.fence, str(out), str(out / "logs" / "train.log"))
        try:
            held.publisher.emit(progress_pb2.ProgressEvent(
                phase=progress_pb2.PHASE_LOADING,
                message=f"host {self.host_id} ({self.gpus.gpu_class}, {self.gpus.gpu_count} GPU(s)) took the job; "
                        f"output {out}"))
            wanted = plan.hardware.gpus_per_node or 1
            attempt = Attempt(held, plan_path, out, timeout_s or queues.DEFAULT_JOB_TIMEOUT_S)
            outcome: Outcome
            if self.gpus.gpu_class != CPU_CLASS and wanted > self.gpus.gpu_count:
                outcome = Finished(progress_pb2.PHASE_FAILED,
                                   f"the plan needs {wanted} GPUs per node; host {self.host_id} has "
                                   f"{self.gpus.gpu_count}. Re-plan with hardware.gpus_per_node <= "
                                   f"{self.gpus.gpu_count}, or run a worker on a bigger host of this class")
            elif plan.hardware.nodes > 1:
                outcome = self._lead(attempt, plan, record.queue)
            else:
                outcome = self._supervise(attempt)
            last = self._finish(held, out, outcome)
        finally:
            structlog.contextvars.unbind_contextvars("job_id", "fence")
        return {"job_id": job_id, "phase": progress_pb2.Phase.Name(last.phase), "step": last.step}

    def _launch(self, plan_path: Path, out: Path, rendezvous: Rendezvous | None = None,
                environment: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        arguments = ["--supervised", "--progress-interval-s", str(self.progress_interval_s),
                     *self.place.roots.arguments(),
                     *(rendezvous.arguments() if rendezvous else [])]
        # a one-node run keeps its checkpoints in the store too; a gang's nodes share their output (--work-dir-shared)
        stored = run_environment(self.place.store, self.store_keep) if rendezvous is None else {}
        return self.launcher(Launch(plan_path, out, arguments, {**(environment or {}), **stored}, self.place.work_dir,
                                    launcher_log_path(out, rendezvous.node_rank if rendezvous else 0)))

    def _supervise(self, attempt: Attempt) -> Outcome:
        """Run the launcher to its end, renewing the lease; stop it for Cancel, the job's timeout, a drain or a
        preemption (those two checkpoint first), and at once when the lease is lost. As a gang's leader (node 0)
        also stop at once when a member is lost or fails, and tell the members when the run stops."""
        held, out, lead = attempt.held, attempt.out, attempt.lead
        stop_path(out).unlink(missing_ok=True)
        heartbeat_path(out).unlink(missing_ok=True)  # the hang watch judges this run's steps only
        with holder.serving(FenceGuard(self.holder_redis, held.job_id, held.fence)) as environment:
            stopped, exit_code = self._run_tree(attempt, environment)
        if isinstance(stopped, LeaseLost):
            return stopped
        held.events.flush(BACKFILL_AFTER_END_S)
        last = self._last_event(held.job_id)
        if last.phase in TERMINAL_PHASES:  # it ended on its own, even if a stop came too late to matter
            return Finished(last.phase, last.message)
        if stopped is not None:
            return stopped
        if lead:
            return lead.settle(lambda: self.control.keep_lease(held))
        if (replanned := after_out_of_memory(self.store, held.job_id, held.fence, attempt.plan_path, out,
                                             self.place.work_dir)) is not None:
            return replanned
        log_path = launcher_log_path(out, 0)
        return Finished(progress_pb2.PHASE_FAILED, f"the launcher exited with status {exit_code} before the run "
                                                   f"ended; its last lines ({log_path}):\n"
                                                   f"{log_tail(log_path, LOG_TAIL_LINES)}")

    def _run_tree(self, attempt: Attempt, environment: dict[str, str]) -> tuple[Outcome | None, int]:
        """Start the launcher and supervise it to its end, publishing its events: the outcome the worker stopped it
        for (None when it ended on its own), and its exit status."""
        held, out, lead = attempt.held, attempt.out, attempt.lead
        publisher, stop_file = held.events, stop_path(out)
        proc = self._launch(attempt.plan_path, out, lead.rendezvous if lead else None, environment)
        deadline = time.monotonic() + attempt.timeout_s
        stop: Stop | None = None
        interrupt_at = hard_stop_at = 0.0
        try:
            for now in while_running(proc):
                at_once: Outcome | None = self.control.keep_lease(held)  # the job may already run elsewhere
                if at_once is None and lead and stop is None:
                    at_once = lead.check()  # the collectives are broken: nothing left to checkpoint
                if at_once is not None:
                    stop = Stop(at_once)
                    break
                publisher.pump()
                stalled = self.hang.stalled_s(out) if stop is None else None
                if stalled is not None:
                    if lead:
                        lead.gang.set_state(DUMPING)  # the other nodes' ranks dump theirs too
                    stop = Stop(hung(proc.pid, out, stalled, lead.view.nodes if lead else 1))
                    log.warning("job.hung", reason=stop.outcome.message)
                    break
                if stop is None:
                    stop = self.control.stop_reason(held.job_id, deadline, attempt.timeout_s, out) or (
                        lead.drain_request() if lead else None)
                    if stop is not None:
                        log.info("job.stopping", reason=stop.outcome.message, checkpoint_first=stop.checkpoint_first)
                        if stop.checkpoint_first:
                            stop_file.write_text(stop.outcome.message)
                            interrupt_at = now + (self.drain_grace_s if stop.checkpoint_within_s is None
                                                  else stop.checkpoint_within_s)
                        else:
                            interrupt_at = now
                        hard_stop_at = interrupt_at + STOP_GRACE_S
                if stop is not None and interrupt_at and now >= interrupt_at:
                    proc.send_signal(signal.SIGUSR1)
                    if lead:
                        lead.gang.set_state(STOPPING, stop.outcome.message)
                    interrupt_at = 0.0
                if stop is not None and hard_stop_at and now >= hard_stop_at:
                    kill_group(proc.pid)
        finally:
            kill_group(proc.pid)  # no rank may outlive its launcher
            proc.wait()
            if lead:
                lead.gang.set_state(STOPPING)  # members still running stop theirs
            stop_file.unlink(missing_ok=True)
        return (stop.outcome if stop else None), proc.returncode

    # --- a multi-node job: this host leads its gang (node 0) ---

    def _lead(self, attempt: Attempt, plan: plan_pb2.Plan, queue: str) -> Outcome:
        """Form the job's gang (fleet.gangs), then run node 0 of it; the gang is gone when this returns."""
        held, out, timeout_s = attempt.held, attempt.out, attempt.timeout_s
        nodes, gpu_class = plan.hardware.nodes, self.gpus.gpu_class
        live = len(self.registry.hosts(gpu_class))
        if live < nodes:
            return RetryLater(f"the job spans {nodes} hosts and the fleet has {live} live {gpu_class} host(s); "
                              f"start more workers of class {gpu_class}")
        gang = Gang(self.redis, held.job_id, held.fence)
        marker = secrets.token_hex(16)
        (out / GANG_MARKER).write_text(marker)
        endpoint = f"{self.address}:{listen_port(self.address)}"  # torchrun binds it later
        gang.form(nodes, self.host_id, endpoint, marker)
        tickets = {k: ticket_id(held.job_id, held.fence, k) for k in range(1, nodes)}
        for k, ticket in tickets.items():
            self.job_queues.enqueue_member(ticket, held.job_id, held.fence, k, queue, timeout_s)
        held.events.emit(progress_pb2.ProgressEvent(
            phase=progress_pb2.PHASE_LOADING,
            message=f"forming a gang of {nodes} {gpu_class} hosts: waiting up to {self.gang_timeout_s:g} s for "
                    f"{nodes - 1} more to join"))
        job_deadline = time.monotonic() + timeout_s
        try:
            formed = wait_for_gang(gang, self.gang_timeout_s,
                                   lambda: self.control.held_back(held, job_deadline, timeout_s, out))
            if not isinstance(formed, GangView):
                return formed
            short = [f"host {formed.members[k]} has {g}" for k, g in sorted(formed.gpus.items())
                     if gpu_class != CPU_CLASS and g < (plan.hardware.gpus_per_node or 1)]
            if short:
                return Finished(progress_pb2.PHASE_FAILED,
                                f"the plan needs {plan.hardware.gpus_per_node} GPUs per node and {', '.join(short)}; "
                                "re-plan with hardware.gpus_per_node at most the smallest host's count")
            gang.set_state(RUNNING)
            held.events.emit(progress_pb2.ProgressEvent(
                phase=progress_pb2.PHASE_LOADING,
                message=f"gang formed: {', '.join(f'node {k} {h}' for k, h in sorted(formed.members.items()))}; "
                        f"rendezvous at {endpoint}"))
            lead = GangLead(gang, formed, Rendezvous(nodes, 0, endpoint, formed.run_id, self.address), out)
            return self._supervise(replace(attempt, lead=lead))
        finally:
            gang.drop()  # a ticket taken from now on finds no gang of this fence and is dropped
            for ticket in tickets.values():
                self.job_queues.withdraw(ticket, queue)

    # --- a multi-node job: this host is a member of its gang (node k >= 1) ---

    def join(self, job_id: str, fence: int, node_rank: int) -> dict[str, Any]:
        """Take a gang's member ticket: join, wait for the leader's start, run node `node_rank` to its end."""
        gang = Gang(self.redis, job_id, fence)
        if not gang.join(node_rank, self.host_id, self.gpus.gpu_count):
            log.info("gang.ticket_stale", job_id=job_id, fence=fence, node_rank=node_rank)
            return {"job_id": job_id, "node_rank": node_rank, "skipped": "stale gang ticket"}
        self.running_job_id = job_id
        self.heartbeat()
        structlog.contextvars.bind_contextvars(job_id=job_id, fence=fence, node_rank=node_rank)
        try:
            record = self.store.record(job_id)
            self._take_place(record)
            out = Path(record.output_dir)
            code = Member(gang, node_rank, self.host_id, self.address, self.place.roots, self.stopping,
                          self._launch).run(out)
            log.info("gang.member_done", exit_code=code)
            return {"job_id": job_id, "node_rank": node_rank, "exit_code": code}
        finally:
            structlog.contextvars.unbind_contextvars("job_id", "fence", "node_rank")
            self.running_job_id = ""
            self.heartbeat()

    def _fail_quietly(self, held: Held, message: str) -> None:
        """Record FAILED after an unexpected worker error, so the job does not look alive forever."""
        try:
            last = self._last_event(held.job_id)
            if last.phase in TERMINAL_PHASES:
                return
            failed = progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_FAILED, step=last.step,
                                                total_steps=last.total_steps, message=message)
            if held.publisher is not None:
                held.publisher.emit(failed)
            else:  # refused before the job had an output directory: the stream is its only record
                failed.job_id, failed.sequence = held.job_id, last.sequence + 1
                failed.time.GetCurrentTime()
                self.events.publish(failed, fence=held.fence)
            self.store.record_error(held.job_id, held.fence, message)
            self._release(held)
        except (redis.RedisError, KeyError, LeaseLostError) as e:
            log.warning("job.fail_record_failed", error=str(e))

    def _release(self, held: Held) -> None:
        """Charge the hold of a job that ended (fleet.ledger: once, confirmed on a replica), then end it, unless the
        job moved on. A charge no replica confirmed keeps the lease until it expires; the sweep then charges it."""
        try:
            charge_ended(self.redis, held.job_id, fence=held.fence)
        except NotReplicatedError as e:
            log.warning("job.charge_unconfirmed", error=str(e))
            return
        self.leases.release(held.job_id, self.host_id, held.fence)

    def _last_event(self, job_id: str) -> progress_pb2.ProgressEvent:
        return self.store.get(job_id, with_plan=False).last_event

    def _finish(self, held: Held, out: Path, outcome: Outcome) -> progress_pb2.ProgressEvent:
        job_id = held.job_id
        last = self._last_event(job_id)
        if isinstance(outcome, LeaseLost):
            log.warning("job.abandoned", reason=outcome.message, step=last.step)
            return progress_pb2.ProgressEvent(job_id=job_id, phase=progress_pb2.PHASE_QUEUED, step=last.step,
                                              message=outcome.message)
        if isinstance(outcome, RetryLater | Requeue):  # back to its queue: after a backoff, or at once at its front
            given_back = release_held(self.redis, job_id, held.fence, outcome.message,
                                      infra_failure=outcome.infra_failure) if isinstance(outcome, RetryLater) else \
                requeue_held(self.redis, job_id, held.fence, f"{outcome.message}; last event at step {last.step}")
            if given_back:
                adopt_hand_back(held)
            log.info("job.given_back" if given_back else "job.moved_on_before_given_back", reason=outcome.message,
                     step=last.step, retry_later=isinstance(outcome, RetryLater))
            return self._last_event(job_id)
        if last.phase != outcome.phase or last.phase not in TERMINAL_PHASES:
            last = held.events.emit(progress_pb2.ProgressEvent(
                phase=outcome.phase, step=last.step, total_steps=last.total_steps, message=outcome.message))
        if outcome.phase == progress_pb2.PHASE_FAILED:
            self.store.record_error(job_id, held.fence, outcome.message)
        self._release(held)
        log.info("job.finished", phase=progress_pb2.Phase.Name(last.phase), step=last.step)
        return last


_runtime: WorkerRuntime | None = None


def install(runtime: WorkerRuntime) -> None:
    """Make `runtime` the one the rq job functions below run on (this process is its worker)."""
    global _runtime
    _runtime = runtime


def execute(job_id: str) -> dict[str, Any]:
    """The rq job function (fleet.queues.JOB_FUNCTION): run one job on this worker's host."""
    if _runtime is None:
        raise RuntimeError("executor.worker.runtime.execute runs inside 'tunefleet worker' only")
    return _runtime.run(job_id)


def join_gang(job_id: str, fence: int, node_rank: int) -> dict[str, Any]:
    """The rq function of a gang's member ticket (fleet.queues.MEMBER_FUNCTION)."""
    if _runtime is None:
        raise RuntimeError("executor.worker.runtime.join_gang runs inside 'tunefleet worker' only")
    return _runtime.join(job_id, fence, node_rank)

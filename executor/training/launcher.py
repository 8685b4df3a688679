"""Run a plan on this host: check it, then start one rank per GPU (or CPU rank): itself on one node
(executor.training.local_ranks), under torchrun against the gang's rendezvous on one node of several.

The ranks are children of this process (or of torchrun's agent) and die with it (common.lifetime), so killing
the launcher's process group kills the run;
the launcher owns the progress file between rank runs and records the outcome when ranks die silently.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from google.protobuf import json_format
from tunefleet.v1 import plan_pb2, progress_pb2

from contract import oom
from contract.errors import LeaseLostError, PlanError, TrainingFailedError
from contract.holder import holder_from_environment
from contract.liveness import RANK_MODULE
from contract.ownership import check_output, claim_output, read_paths
from contract.paths import Roots
from contract.progress import (
    DEFAULT_PROGRESS_INTERVAL_S,
    TERMINAL_PHASES,
    JsonlProgressSink,
    ProgressSink,
    ProgressTail,
    log_tail,
)
from contract.rendezvous import Rendezvous
from contract.run_config import RunConfig, parse_plan, run_config_from_plan
from contract.store import STORE_ENV
from executor.training import corpus, data, determinism, inputs, native
from executor.training.local_ranks import LocalRanks
from executor.training.model import check_host, check_model, detect_host
from executor.training.process import WITHOUT_BITSANDBYTES_ENV

# Exit status of a rank that stopped on purpose (bad plan, does not fit), as opposed to one that crashed.
RANK_EXIT_REFUSED = 3
# Stops the run without ending the job (a fleet worker shutting down): ranks stop, no terminal event is written,
# and the plan resumes from its last checkpoint when run again. SIGTERM/SIGINT cancel the job instead.
INTERRUPT_SIGNAL = signal.SIGUSR1
_POLL_S = 0.2  # how often the launcher forwards new progress lines while it waits for the ranks
LOG_TAIL_LINES = 15  # lines of a failed run's log quoted in its FAILED event


@dataclass(frozen=True)
class RunResult:
    config: RunConfig
    exit_code: int
    last_event: progress_pb2.ProgressEvent

    @property
    def succeeded(self) -> bool:
        return self.last_event.phase == progress_pb2.PHASE_DONE

    @property
    def refused(self) -> bool:
        return self.exit_code == RANK_EXIT_REFUSED

    @property
    def interrupted(self) -> bool:
        return self.last_event.phase not in TERMINAL_PHASES


def read_run_config(plan_path: Path, output_dir: str | None = None) -> RunConfig:
    return run_config_from_plan(parse_plan(plan_path.read_bytes(), str(plan_path)), output_dir)


def confine(cfg: RunConfig, roots: Roots) -> None:
    """The run reads only under the host's data roots and writes only under its output roots (contract.paths),
    into an output directory no other run owns (contract.ownership)."""
    roots.writable("output_uri", cfg.output_dir)
    if cfg.output_store:
        roots.writable_uri("output_uri", cfg.output_store)
    check_output(cfg.output_dir, cfg.plan_id, roots.output, read_paths(cfg, Path.cwd()))
    if cfg.dataset.local_path:
        roots.readable("dataset.local_path", cfg.dataset.local_path)
    if cfg.dataset.hub_name:
        roots.local_source("dataset.hub_name", cfg.dataset.hub_name)
    roots.local_source("model.weights", cfg.model_path)


def check(cfg: RunConfig, roots: Roots | None = None) -> tuple[corpus.Examples, data.DataOrder]:
    """Everything that can be refused without training: paths, host, model modules, dataset (images included),
    data order. Returns the tokenized dataset and its order."""
    roots = roots or Roots.from_environment()
    confine(cfg, roots)
    check_host(cfg, detect_host())
    check_model(cfg)
    examples = corpus.build(cfg, roots)
    return examples, data.DataOrder.of(examples, cfg.training.micro_batch_size, cfg.world_size, cfg.seed)


@dataclass(frozen=True)
class CheckReport:
    config: RunConfig
    examples: int
    trained_tokens: int
    total_steps: int
    gpus: int


def _localised(plan_path: Path, roots: Roots | None) -> tuple[bytes, plan_pb2.Plan, Roots]:
    """The plan as its ranks read it, and the roots it is confined to: object-store inputs replaced by this host's
    cached copies of them (executor.training.inputs), which become readable."""
    plan_bytes = plan_path.read_bytes()
    named = parse_plan(plan_bytes, str(plan_path))
    plan, roots = inputs.localise(named, roots or Roots.from_environment(), inputs.cache_dir(),
                                  lambda message: print(message, file=sys.stderr, flush=True))
    return (plan_bytes if plan is named else json_format.MessageToJson(plan).encode()), plan, roots


def check_plan(plan_path: Path, output_dir: str | None = None, roots: Roots | None = None) -> CheckReport:
    """Run every check `train` runs before it starts, and say what the run would be; trains nothing."""
    _, plan, roots = _localised(plan_path, roots)
    cfg = run_config_from_plan(plan, output_dir)
    examples, order = check(cfg, roots)
    t = cfg.training
    return CheckReport(cfg, len(examples), sum(e.trained_tokens for e in examples),
                       data.total_steps(order, cfg.epochs, t.gradient_accumulation_steps, cfg.max_steps),
                       detect_host().gpu_count)


def _save_plan(plan_bytes: bytes, cfg: RunConfig) -> Path:
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    path = cfg.output_dir / "plan.json"
    if path.exists():
        if path.read_bytes() == plan_bytes:
            return path  # the same plan (another node of the run wrote it, or an earlier run)
        previous = read_run_config(path, str(cfg.output_dir))
        if previous.plan_id != cfg.plan_id:
            raise PlanError("output_uri", f"{cfg.output_dir} belongs to plan {previous.plan_id}; give plan "
                                          f"{cfg.plan_id} its own output directory")
    data.write_atomically(path, lambda f: f.write(plan_bytes))  # other nodes' ranks may be reading it
    return path


def _start_ranks(plan_path: Path, cfg: RunConfig, progress_interval_s: float, rendezvous: Rendezvous | None,
                 env: dict[str, str], log: IO[str]) -> subprocess.Popen[bytes] | LocalRanks:
    """This node's ranks: started here for a one-node run (executor.training.local_ranks), under torchrun's agent
    against the gang's rendezvous for one node of several."""
    arguments = [str(plan_path), "--output", str(cfg.output_dir), "--progress-interval-s", str(progress_interval_s)]
    if rendezvous is None:
        return LocalRanks([sys.executable, "-u", "-m", RANK_MODULE, *arguments], cfg.ranks_per_node, env, log)
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *rendezvous.torchrun_arguments(),
                             f"--nproc-per-node={cfg.ranks_per_node}", "--max-restarts=0", "-m", RANK_MODULE,
                             *arguments], stdout=log, stderr=subprocess.STDOUT, env=env)


def _check_nodes(cfg: RunConfig, rendezvous: Rendezvous | None) -> None:
    if cfg.nodes > 1 and rendezvous is None:
        raise PlanError("hardware.nodes", f"is {cfg.nodes}: the run spans {cfg.nodes} hosts, which only a fleet "
                                          "gang starts together; Submit the plan to the fleet (tunefleet submit), or "
                                          "re-plan for one node")
    if rendezvous is not None and rendezvous.nodes != cfg.nodes:
        raise PlanError("hardware.nodes", f"is {cfg.nodes}, but the gang that started this run has "
                                          f"{rendezvous.nodes} nodes")


def _forward_new(tail: ProgressTail, on_event: Callable[[progress_pb2.ProgressEvent], None],
                 last: progress_pb2.ProgressEvent) -> progress_pb2.ProgressEvent:
    """Hand new events to on_event; returns the latest event of the file."""
    for event in tail.read_new():
        on_event(event)
        last = event
    return last


def train(plan_path: Path, output_dir: str | None = None, progress_interval_s: float = DEFAULT_PROGRESS_INTERVAL_S,
          on_event: Callable[[progress_pb2.ProgressEvent], None] = lambda e: None,
          supervised: bool = False, roots: Roots | None = None,
          rendezvous: Rendezvous | None = None) -> RunResult:
    """Check the plan, run it to the end (resuming from its last checkpoint), and return how it ended.

    Raises PlanError / HostError before anything runs when the plan cannot run here. A supervised run (a fleet
    worker's) kills its whole process group if the worker dies (no rank outlives it); its rank 0 asks the worker
    before each write whether the run still holds the job (contract.holder). A run that stopped at a STOP
    file (checkpoint written) or on INTERRUPT_SIGNAL ends without a terminal event. One node of a multi-node run
    (a Rendezvous) records no end either: the gang leader decides it, knowing whether a node was lost.
    """
    plan_bytes, plan, roots = _localised(plan_path, roots)
    cfg = run_config_from_plan(plan, output_dir)
    _check_nodes(cfg, rendezvous)
    examples, _ = check(cfg, roots)
    claim_output(cfg.output_dir, cfg.plan_id, roots.output, read_paths(cfg, Path.cwd()))
    saved = _save_plan(plan_bytes, cfg)
    corpus.save(cfg.tokenized_path, examples)
    log_path = cfg.node_log_path(rendezvous.node_rank if rendezvous else 0)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    tail = ProgressTail(cfg.progress_path)
    earlier = tail.read_new()  # events of earlier runs of this plan are not news
    last = earlier[-1] if earlier else progress_pb2.ProgressEvent()
    env = dict(os.environ, PYTHONUNBUFFERED="1", **determinism.environment(cfg))
    if not cfg.training.method.quantises:
        env[WITHOUT_BITSANDBYTES_ENV] = "1"
    if not detect_host().has_gpu:
        env.setdefault("DS_ACCELERATOR", "cpu")
        env.update(native.isa_cap(env))  # once per environment and CPU (cached): AMX that dies with SIGILL
    if cfg.output_store:  # the plan's own store: its checkpoints and export go there (executor.training.remote)
        env[STORE_ENV] = cfg.output_store
    if rendezvous:
        env.update(rendezvous.environment())
    elif supervised and not cfg.on_oom.disabled:
        env[oom.REPLAN_ENV] = "1"  # out of memory: the ranks report it, and the worker re-plans
    oom.report_path(cfg.output_dir).unlink(missing_ok=True)
    stop: signal.Signals | None = None
    parent = os.getppid()

    with log_path.open("a") as log, contextlib.ExitStack() as closing:
        # The end this run may have to record goes into the file it started on, opened now (contract.progress);
        # one node of a multi-node run records none.
        sink = None if rendezvous else closing.enter_context(contextlib.closing(
            JsonlProgressSink(cfg.progress_path, cfg.plan_id, holder=holder_from_environment())))
        proc = _start_ranks(saved, cfg, progress_interval_s, rendezvous, env, log)

        def _stop(signum: int, _frame: object) -> None:
            nonlocal stop
            stop = signal.Signals(signum)
            proc.send_signal(signal.SIGTERM)

        previous = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGINT, INTERRUPT_SIGNAL)}
        try:
            while True:
                try:
                    exit_code = proc.wait(timeout=_POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    last = _forward_new(tail, on_event, last)
                    if supervised and os.getppid() != parent:  # the worker died: its session's ranks must not go on
                        os.killpg(os.getpgrp(), signal.SIGKILL)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        last = _forward_new(tail, on_event, last)
        ended = last.phase in TERMINAL_PHASES and not (exit_code != 0 and last.phase == progress_pb2.PHASE_DONE)
        stopped_to_yield = exit_code == 0 and cfg.stop_path.is_file()  # ranks checkpointed and stopped (drain, preempt)
        to_replan = env.get(oom.REPLAN_ENV) == "1" and oom.report_path(cfg.output_dir).is_file()
        if sink and not ended and stop is not INTERRUPT_SIGNAL and not stopped_to_yield and not to_replan:
            sink.catch_up()  # numbered after rank 0's events
            with contextlib.suppress(LeaseLostError):  # the job runs elsewhere now: this run records nothing
                last = _record_end(sink, stop, exit_code, last, cfg)
            on_event(last)
    return RunResult(cfg, exit_code, last)


def _record_end(sink: ProgressSink, stop: signal.Signals | None, exit_code: int, last: progress_pb2.ProgressEvent,
                cfg: RunConfig) -> progress_pb2.ProgressEvent:
    """The terminal event of a run whose ranks ended without one: cancelled by a signal, or crashed."""
    if stop is not None:
        return sink.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_CANCELLED, step=last.step,
                                                    total_steps=last.total_steps,
                                                    message="cancelled; rerun the plan to resume"))
    tail = log_tail(cfg.log_path, LOG_TAIL_LINES)
    killed = native.killing_signal(exit_code)
    failure = TrainingFailedError(f"training ranks exited with status {exit_code}"
                                  f"{'; ' + killed if killed else ''}; the last log lines ({cfg.log_path}):\n{tail}")
    return sink.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_FAILED, step=last.step,
                                                total_steps=last.total_steps, message=str(failure)))

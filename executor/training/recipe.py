"""One training rank: DeepSpeed engine from the plan's config, deterministic data, checkpoints, progress.

Launched once per GPU (or per CPU rank with DS_ACCELERATOR=cpu) by executor.training.launcher; rank 0
writes progress and the final artefacts.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

import deepspeed
import structlog
import torch
import torch.distributed as dist
import transformers
from google.protobuf import json_format
from transformers.integrations import HfDeepSpeedConfig
from tunefleet.v1 import progress_pb2

from common.lifetime import die_with_parent
from common.units import GiB, size
from contract import liveness, oom
from contract.errors import ExecutorError, LeaseLostError, PlanError
from contract.holder import Holder, holder_from_environment
from contract.paths import Roots
from contract.progress import DEFAULT_PROGRESS_INTERVAL_S, JsonlProgressSink, ProgressSink
from contract.run_config import RunConfig
from contract.schema import Objective
from contract.store import store_from_environment
from executor.training import checkpoint, corpus, data, determinism, dpo, extensions, memory_guard, remote
from executor.training.launcher import RANK_EXIT_REFUSED, read_run_config
from executor.training.measure import Window, library_versions, peak_memory, relative_error, reset_peak_memory
from executor.training.model import Host, check_host, detect_host, load_model, load_reference_model, load_tokenizer
from executor.training.objective import Batch, BatchObjective, Dpo, Sft, StepLoss

log = structlog.get_logger("executor.training")
RANK_EXIT_ORPHANED = 1
STEP_TIME_WEIGHT = 0.2  # of the newest step in the moving average of the step time


class _NullSink:
    """Ranks other than 0 report nothing."""

    def emit(self, event: progress_pb2.ProgressEvent) -> progress_pb2.ProgressEvent:
        return event

    def close(self) -> None:
        return None


@dataclass(frozen=True)
class Setup:
    tokenizer: Any
    examples: corpus.Examples
    order: data.DataOrder
    total_steps: int
    engine: Any
    objective: BatchObjective


class Trainer:
    def __init__(self, cfg: RunConfig, host: Host, rank: int, world_size: int, sink: ProgressSink,
                 progress_interval_s: float, holder: Holder) -> None:
        self.cfg, self.host, self.rank, self.world_size, self.sink = cfg, host, rank, world_size, sink
        self.progress_interval_s = progress_interval_s
        self.holder = holder
        self.frozen_excluded = cfg.training.method.uses_adapters
        self._checkpoint_s = 0.0  # the last checkpoint's duration, for the hang watch
        store = store_from_environment()  # a fleet without a shared filesystem: checkpoints also go there
        self.store = remote.RunStore(store, rank, remote.keep_from_environment(cfg.keep_checkpoints), holder.confirm,
                                     self._report_store) if store is not None else None

    def emit(self, phase: int, **fields: Any) -> None:
        if self.rank == 0:
            self.sink.emit(progress_pb2.ProgressEvent(phase=phase, **fields))

    def run(self) -> None:
        self._first_step = memory_guard.FirstStepCounter(self.cfg, self.host.has_gpu)
        try:
            self._run()
        finally:
            self._first_step.stop()

    def _run(self) -> None:
        if self.store is not None:
            self.store.check()
        setup = self.setup()
        step, next_g = self._resume(setup.engine, setup.total_steps)
        if step >= setup.total_steps and self.cfg.summary_path.is_file():
            # a finished run started again: keep its artefacts and measurements as they are
            self.emit(progress_pb2.PHASE_DONE, step=step, total_steps=setup.total_steps,
                      message=f"already complete at step {step}; {self.cfg.final_dir} and "
                              f"{self.cfg.summary_path} are unchanged")
            return
        if self.store is not None:
            self.store.start_uploads()
        started = time.perf_counter()
        last = self.loop(setup, step, next_g, stop_step=setup.total_steps)
        loop_s = time.perf_counter() - started
        self._uploads_done(last)
        if last < setup.total_steps:
            log.info("stopped", step=last, reason="stop file")
            return  # asked to yield: checkpointed (and stored), no export, no terminal event
        self._export(setup.engine, setup.tokenizer)
        self._summary(setup.total_steps, last, steps_run=last - step, loop_s=loop_s)

    def _uploads_done(self, step: int) -> None:
        if self.store is not None:
            self._beat(step, 0.0, liveness.CHECKPOINTING)  # waiting on the network is not a hang
            self.store.finish(step)

    def _report_store(self, step: int, notice: remote.Notice) -> None:
        stored = progress_pb2.StoredCheckpoint(step=notice.stored_step, uri=notice.stored_uri) \
            if notice.stored_uri else None
        self.emit(progress_pb2.PHASE_LOADING if step == 0 else progress_pb2.PHASE_TRAINING, step=step,
                  message=notice.message, stored_checkpoint=stored)

    def setup(self) -> Setup:
        """Tokenizer, tokenized data and its order, and the DeepSpeed engine built from the plan's config."""
        cfg, t = self.cfg, self.cfg.training
        self.emit(progress_pb2.PHASE_LOADING, message=f"loading {cfg.model_path} on {self.world_size} rank(s)")
        transformers.set_seed(cfg.seed)
        determinism.apply(cfg)
        tokenizer = load_tokenizer(cfg)
        if cfg.tokenized_path.is_file():  # written by the launcher from the data it checked
            examples = corpus.load(cfg.tokenized_path)
        else:
            examples = corpus.build(cfg, Roots.from_environment(), tokenizer)
        order = data.DataOrder.of(examples, t.micro_batch_size, self.world_size, cfg.seed)
        ds_config = cfg.deepspeed_config
        # Under ZeRO-3 from_pretrained must see the DeepSpeed config, so that every rank loads only its shard
        # (zero.Init) instead of the whole model in host RAM; the object has to stay alive while loading.
        zero3_loading = HfDeepSpeedConfig(ds_config) if t.zero_stage == 3 else None
        model = load_model(cfg, self.host)
        engine, *_ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters()
                                                                         if p.requires_grad],
                                          config=ds_config)
        objective = self._objective(examples, tokenizer.pad_token_id, engine)
        del zero3_loading
        return Setup(tokenizer, examples, order,
                     data.total_steps(order, cfg.epochs, t.gradient_accumulation_steps, cfg.max_steps), engine,
                     objective)

    def _objective(self, examples: corpus.Examples, pad_token_id: int, engine: Any) -> BatchObjective:
        """SFT, or DPO with its reference: precomputed once (stored with the job), the policy with its adapter
        disabled, or a separate frozen copy (loaded while ZeRO-3's loading context is alive, so it is partitioned)."""
        t = self.cfg.training
        if t.objective is not Objective.DPO:
            image_token_id = getattr(engine.module.config, "image_token_id", None)
            return Sft(pad_token_id, examples, -1 if image_token_id is None else int(image_token_id))  # type: ignore[arg-type]
        pairs: Any = examples
        plain = Dpo(pad_token_id, t.sequence_length, t.dpo, pairs)
        if t.dpo.precompute_reference:
            return replace(plain, stored=self._reference_log_probs(plain, engine, len(pairs)))
        if t.method.uses_adapters and not t.dpo_reference_model:
            return replace(plain, reference=dpo.adapter_disabled(engine))
        return replace(plain, reference=dpo.frozen_copy(load_reference_model(self.cfg), self.cfg.deepspeed_config))

    def _reference_log_probs(self, plain: Dpo, engine: Any, count: int) -> torch.Tensor:
        """The stored values, or computed now from the initial weights (before any checkpoint is loaded) and
        stored by rank 0 for every later run of the job."""
        path = self.cfg.reference_path
        stored = dpo.load_reference(path, count)
        if stored is not None:
            return stored
        t = self.cfg.training
        reference = dpo.adapter_disabled(engine) if t.method.uses_adapters else dpo.policy(engine)
        self.emit(progress_pb2.PHASE_LOADING, message=f"computing the reference log-probs of {count} pairs once")
        values = dpo.precompute(reference, count, t.micro_batch_size, self.rank, self.world_size,
                                lambda indices: plain.collate(indices, engine.device).tensors)
        if self.rank == 0:
            dpo.save_reference(path, values)
        if dist.is_initialized():
            dist.barrier()
        return values

    def batch(self, s: Setup, micro_batch_index: int) -> Batch:
        return s.objective.collate(s.order.indices(micro_batch_index, self.rank), s.engine.device)

    def loop(self, s: Setup, step: int, next_g: int, stop_step: int) -> int:
        """Optimizer steps step+1 .. stop_step with progress and checkpoints; returns the last step done, which is
        earlier when the run finds its STOP file (it checkpoints that step first)."""
        cfg, engine, total = self.cfg, s.engine, s.total_steps
        reset_peak_memory()
        first_step, started = step + 1, time.perf_counter()
        window = Window(started_s=started)
        step_s: float | None = None  # a step's recent duration, for the worker's hang watch
        while step < stop_step:
            step += 1
            step_started = time.perf_counter()
            for _ in range(cfg.training.gradient_accumulation_steps):
                batch = self.batch(s, next_g)
                window.add(self._micro_step(s, batch, step), batch.tokens)
                next_g += 1
            took_s = time.perf_counter() - step_started
            # the first step (preflight, warm-up) only stands in until a regular step replaces it
            step_s = took_s if step_s is None or step == first_step + 1 else \
                (1 - STEP_TIME_WEIGHT) * step_s + STEP_TIME_WEIGHT * took_s
            if step == first_step:
                peak = memory_guard.check_first_step(self._first_step, cfg, cfg.output_dir, step, engine.device)
                self._report_preflight(step, total, time.perf_counter() - step_started, peak)
            now = time.perf_counter()
            if step == total or now - window.started_s >= self.progress_interval_s:
                self._report(step, total, s.order.epoch_of(next_g), engine, window, now,
                             eta_s=(now - started) / (step - first_step + 1) * (total - step))
                window = Window(started_s=now)
            checkpointed = step == total or bool(cfg.checkpoint_every_steps and step % cfg.checkpoint_every_steps == 0)
            if checkpointed:
                self._save(engine, step, next_g, step_s, last=step == total)
            if step < total and self._asked_to_stop(engine):
                if not checkpointed:
                    self._save(engine, step, next_g, step_s, last=True)
                return step
            if step < total:
                if self.store is not None:
                    self.store.notices(step)
                self._beat(step, step_s, liveness.TRAINING)
        return step

    def _save(self, engine: Any, step: int, next_g: int, step_s: float, last: bool) -> None:
        """A checkpoint, timed for the hang watch; training resumes being judged the moment it is sealed (a rank
        stopped after it stalls the next collective), and the last one's heartbeat stays through the export."""
        self._beat(step, step_s, liveness.CHECKPOINTING)
        started = time.perf_counter()
        self._checkpoint(engine, step, next_g)
        self._checkpoint_s = time.perf_counter() - started
        if not last:
            self._beat(step, step_s, liveness.TRAINING)

    def _beat(self, step: int, step_s: float, phase: str) -> None:
        """Rank 0 tells the worker a step completed (or that a long write runs): the hang watch reads it."""
        if self.rank == 0:
            liveness.write_heartbeat(liveness.heartbeat_path(self.cfg.output_dir), step, step_s, phase,
                                     self._checkpoint_s)

    def _asked_to_stop(self, engine: Any) -> bool:
        """Whether rank 0 sees the STOP file, agreed by every rank (they must checkpoint together)."""
        return checkpoint.rank0_decides(self.rank == 0 and self.cfg.stop_path.is_file(), engine.device)

    def _micro_step(self, s: Setup, batch: Batch, optimizer_step: int) -> StepLoss:
        engine = s.engine
        try:
            step = s.objective.loss(engine, batch)
            engine.backward(step.loss)
            engine.step()
        except torch.OutOfMemoryError as e:
            memory_guard.out_of_memory(self.cfg.output_dir, memory_guard.gpu_report(optimizer_step, e))
            raise
        return StepLoss(step.loss.detach(), step.metrics, step.count)  # the graph is not kept alive past backward

    def _resume(self, engine: Any, total: int) -> tuple[int, int]:
        if self.store is not None:
            self.store.fetch_newer(self.cfg.checkpoint_dir, lambda value: checkpoint.rank0_decides(value,
                                                                                                   engine.device))
        found = checkpoint.latest(self.cfg.checkpoint_dir)
        if found is None:
            return 0, 0
        state, path = found
        if state.plan_id != self.cfg.plan_id or state.world_size != self.world_size:
            raise PlanError("output_uri", f"{path} holds a checkpoint of plan {state.plan_id} on {state.world_size} "
                                          f"rank(s), not plan {self.cfg.plan_id} on {self.world_size}; "
                                          "give this run its own output directory")
        refused = checkpoint.verify(path, checkpoint.signing_key()) if self.rank == 0 else ""
        if checkpoint.rank0_decides(bool(refused), engine.device):
            raise PlanError("output_uri", f"{path} was not loaded: {refused or 'rank 0 refused it'}. A checkpoint is "
                                          "trusted only as its run wrote it; move it away to start over, or set "
                                          f"{checkpoint.KEY_ENV} to the key of the host that wrote it")
        checkpoint.load(engine, path, self.rank, self.frozen_excluded)
        self.emit(progress_pb2.PHASE_LOADING, step=state.step, total_steps=total,
                  message=f"resumed from {path} at step {state.step} (the data resumes at its micro-batch "
                          f"{state.next_micro_batch:,}, where step {state.step + 1} starts)")
        log.info("resumed", step=state.step, checkpoint=str(path))
        # every step reads gradient_accumulation_steps micro-batches: the same position as the stored one, and the
        # same sample after a re-plan that traded micro-batch for accumulation (contract.oom)
        return state.step, state.step * self.cfg.training.gradient_accumulation_steps

    def _report_preflight(self, step: int, total: int, step_time_s: float, counted_bytes: int | None) -> None:
        peak, predicted = peak_memory(), self.cfg.predicted.peak_gpu_memory_bytes
        if counted_bytes is not None:
            verdict = (f"allocated peak {size(counted_bytes)} ({counted_bytes} bytes; live tensors, no GPU) within "
                       f"the plan's capacity of {size(self.cfg.predicted.capacity_bytes)}")
        elif self.host.has_gpu and predicted:
            error = relative_error(peak.gpu_reserved_bytes, predicted)
            verdict = (f"measured peak {peak.gpu_reserved_bytes / GiB:.2f} GiB reserved "
                       f"({peak.gpu_allocated_bytes / GiB:.2f} GiB allocated) vs planned {predicted / GiB:.2f} GiB "
                       f"({error:+.1%})")
        else:
            verdict = f"measured host peak {peak.host_bytes / GiB:.2f} GiB (no GPU: GPU prediction not comparable)"
        self.emit(progress_pb2.PHASE_PREFLIGHT, step=step, total_steps=total,
                  peak_gpu_memory_bytes=peak.gpu_reserved_bytes, peak_host_memory_bytes=peak.host_bytes,
                  message=f"first step on the longest batch took {step_time_s:.2f} s; {verdict}")

    def _report(self, step: int, total: int, epoch: float, engine: Any, w: Window, now: float, eta_s: float) -> None:
        peak = peak_memory()
        elapsed = max(now - w.started_s, 1e-9)
        self.emit(progress_pb2.PHASE_TRAINING, step=step, total_steps=total, epoch=epoch,
                  loss=float(w.loss_sum) / max(w.micro_batches, 1), learning_rate=float(engine.get_lr()[0]),
                  tokens_per_s=w.tokens * self.world_size / elapsed, peak_gpu_memory_bytes=peak.gpu_reserved_bytes,
                  peak_host_memory_bytes=peak.host_bytes, eta_s=eta_s, metrics=w.metrics())

    def _checkpoint(self, engine: Any, step: int, next_g: int) -> None:
        state = checkpoint.TrainerState(self.cfg.plan_id, step, next_g, self.world_size, self.holder.fence)
        path = checkpoint.save(engine, self.cfg.checkpoint_dir, state, self.rank, self.cfg.keep_checkpoints,
                               self.frozen_excluded, may_seal=self.holder.confirm)
        if path is None:
            self.emit(progress_pb2.PHASE_TRAINING, step=step,
                      message=f"checkpoint at step {step} not sealed: the fleet could not confirm this run still "
                              "owns the job (Redis unreachable); the next checkpoint tries again")
            return
        self.emit(progress_pb2.PHASE_CHECKPOINTING, step=step, checkpoint_path=str(path),
                  message=f"checkpoint complete at step {step}")
        if self.store is not None:
            self.store.submit(path, step, self.holder.fence)

    def _export(self, engine: Any, tokenizer: Any) -> None:
        """The adapter (or full model) with save_pretrained, and the tokenizer, in <output>/final."""
        state_dict = engine._zero3_consolidated_16bit_state_dict() if self.cfg.training.zero_stage == 3 else None
        if self.rank == 0:
            final = self.cfg.final_dir
            final.mkdir(parents=True, exist_ok=True)
            engine.module.save_pretrained(final, state_dict=state_dict)  # None: the module's own weights
            tokenizer.save_pretrained(final)
            if self.store is not None:
                self.store.store_export(final)
        if dist.is_initialized():
            dist.barrier()

    def _summary(self, total: int, last_step: int, steps_run: int, loop_s: float) -> None:
        """summary.json: measured against predicted (the Feedback message the fleet stores with the job's DONE,
        which the worker reads from here), written before the DONE event."""
        if self.rank != 0:
            return
        peak, t, predicted = peak_memory(), self.cfg.training, self.cfg.predicted
        step_time_s = loop_s / steps_run if steps_run else 0.0
        tokens_per_step = t.micro_batch_size * t.sequence_length * t.gradient_accumulation_steps * self.world_size
        feedback = progress_pb2.Feedback(
            predicted_peak_gpu_memory_bytes=predicted.peak_gpu_memory_bytes,
            predicted_allocated_gpu_memory_bytes=predicted.allocated_gpu_memory_bytes,
            measured_peak_gpu_memory_bytes=peak.gpu_allocated_bytes,
            measured_peak_gpu_reserved_bytes=peak.gpu_reserved_bytes, predicted_step_time_s=predicted.step_time_s,
            measured_step_time_s=step_time_s, predicted_tokens_per_s=predicted.tokens_per_s,
            measured_tokens_per_s=tokens_per_step / step_time_s if step_time_s else 0.0, nodes=self.cfg.nodes,
            world_size=self.world_size, predicted_communication_time_s=predicted.communication_time_per_step_s,
            library_versions=library_versions())
        summary = {"plan_id": self.cfg.plan_id, "total_steps": total, "steps_this_run": steps_run,
                   "final_dir": str(self.cfg.final_dir), "peak_host_memory_bytes": peak.host_bytes,
                   "feedback": json_format.MessageToDict(feedback, preserving_proto_field_name=True)}
        self.cfg.summary_path.write_text(json.dumps(summary, indent=1, sort_keys=True))
        self.emit(progress_pb2.PHASE_DONE, step=last_step, total_steps=total,
                  peak_gpu_memory_bytes=peak.gpu_reserved_bytes, peak_host_memory_bytes=peak.host_bytes,
                  message=f"saved {self.cfg.final_dir}")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="one training rank (started by executor.training.launcher)")
    p.add_argument("plan", type=Path)
    p.add_argument("--output", required=True)
    p.add_argument("--progress-interval-s", type=float, default=DEFAULT_PROGRESS_INTERVAL_S)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    # A rank that native code kills (SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE) writes every thread's Python stack
    # to its log first, so the failure message's log tail says where it died.
    faulthandler.enable(all_threads=True)
    # Each rank runs in a session of its own (as torchrun starts them), out of reach of a signal to the launcher's
    # process group: the kernel kills the rank when its parent (the launcher, or torchrun's agent) dies, so no rank
    # outlives its node's run
    die_with_parent(RANK_EXIT_ORPHANED)
    args = _parse_args(argv)
    transformers.utils.logging.disable_progress_bar()  # rank output goes to logs/train.log, not a terminal
    rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    cfg = read_run_config(args.plan, args.output)
    # Asked by the worker's hang watch (liveness.DUMP_SIGNAL), every thread's stack into a file of this rank's own.
    stacks = liveness.stacks_path(cfg.output_dir, rank)
    stacks.parent.mkdir(parents=True, exist_ok=True)
    faulthandler.register(liveness.DUMP_SIGNAL, file=stacks.open("w"), all_threads=True)
    structlog.contextvars.bind_contextvars(job_id=cfg.plan_id, rank=rank)
    holder = holder_from_environment()
    sink: ProgressSink = JsonlProgressSink(cfg.progress_path, cfg.plan_id, holder=holder) if rank == 0 else _NullSink()
    try:
        host = detect_host()
        check_host(cfg, host)
        if host.has_gpu:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        else:
            extensions.remember_cpu_info()
            building = extensions.ops_to_build() if rank == 0 else []
            if building:  # minutes of compiling: say so instead of sitting silently in LOADING
                sink.emit(progress_pb2.ProgressEvent(
                    phase=progress_pb2.PHASE_LOADING,
                    message=f"building DeepSpeed CPU ops ({', '.join(building)}; once per install, minutes)"))
        deepspeed.init_distributed(dist_backend="nccl" if host.has_gpu else "gloo")
        Trainer(cfg, host, rank, world_size, sink, args.progress_interval_s, holder).run()
    except LeaseLostError as e:
        print(f"tunefleet: {e}", file=sys.stderr)  # another host runs the job: record nothing
        return RANK_EXIT_REFUSED
    except memory_guard.OutOfMemoryReportedError as e:
        print(f"tunefleet: {e}; the worker re-plans", file=sys.stderr)  # its report is written: record nothing
        return oom.RANK_EXIT_OUT_OF_MEMORY
    except ExecutorError as e:
        if rank == 0:
            sink.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_FAILED, message=str(e)))
        print(f"tunefleet: {e}", file=sys.stderr)
        return RANK_EXIT_REFUSED
    except BaseException as e:
        # A crash of one node of a multi-node run is often another node lost (its collectives fail here): the gang
        # leader decides between FAILED and a retry, so rank 0 records nothing then.
        if rank == 0 and cfg.nodes == 1:
            sink.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_FAILED,
                                                 message=f"{type(e).__name__}: {e}; see {cfg.log_path}"))
        raise
    finally:
        sink.close()
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


def exit_now(code: int) -> NoReturn:
    """End a rank whose work is done (outputs written, sink closed, process group destroyed) without the
    interpreter's teardown: there, a native thread of torch or DeepSpeed destroyed while still joinable aborted
    finished ZeRO-3 ranks ("terminate called without an active exception", SIGABRT after PHASE_DONE: 2 of 523
    tests in one loaded suite run), failing jobs that had succeeded."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


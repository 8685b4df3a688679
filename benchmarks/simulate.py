"""The executor's own training step at full size on the CPU, under fake tensors: its peak allocated bytes.

`simulate` builds the model from its config.json exactly as the executor lays it out
(executor.training.model.from_config: class, attention implementation, dtype), wraps it with the executor's
`prepare_model` (checkpointing, PEFT, frozen parts), builds the DeepSpeed engine from the planner's DeepSpeed
config for the world size (a fake process group, so ZeRO partitions as on N ranks), and runs full steps —
forward and loss (the executor's Sft objective), engine.backward, engine.step — while executor.training.live_bytes
counts every storage. With `fake=False` the same code runs on real tensors (small models only): the two peaks
agree byte for byte (tests/benchmarks/test_simulate.py).

CPU and CUDA paths differ in one place that changes what a step allocates — dropout's mask — and the step runs
CUDA's way there (benchmarks/fake_step.py: `as_on_cuda`, which also says why SDPA and FusedAdam need nothing).
QLoRA quantises the fake model with transformers' quantizer and bitsandbytes' fake kernels, its 4-bit matmul
allocating as on CUDA (benchmarks/quantised.py). What fake tensors cannot do
(read a value, call a C++ kernel) gets a stand-in that allocates what the real path allocates (`_stand_ins`,
fake_step's `Scalars` and `swappable`).

`make bench-simulate` runs the table (`python -m benchmarks.simulate --match TEXT` runs the rows whose label has
TEXT); tests/benchmarks/test_simulate.py holds the harness to real tensors and keeps a few full-size rows as a
regression test.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import gc
import json
import math
import os
import queue
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from executor.training.process import prepare

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode  # noqa: E402

from benchmarks.common import PUBLIC, fake_process_group  # noqa: E402
from benchmarks.fake_step import Scalars, as_on_cuda, swappable  # noqa: E402
from benchmarks.quantised import kernels_as_on_cuda, quantised, real_dynamic_map  # noqa: E402
from benchmarks.recipes import (  # noqa: E402
    hf_trainer_model,
    hf_trainer_peaks,
    loaded,
    trainer_arguments,
    trl_dpo_peaks,
    trl_sft_peaks,
)
from benchmarks.simulate_rows import RESULTS_CSV, THIRD_PARTY_RESERVED, Row, table_rows  # noqa: E402
from benchmarks.torchtune_recipe import in_torchtune_venv, torchtune_peaks  # noqa: E402
from benchmarks.venvs import LEGACY, VenvError, in_venv  # noqa: E402
from common.units import GiB  # noqa: E402
from contract.deepspeed_config import deepspeed_config  # noqa: E402
from contract.schema import (  # noqa: E402
    Hardware,
    Method,
    Objective,
    Recipe,
    TrainingSpec,
)
from executor.training.caching_allocator import CachingAllocator  # noqa: E402
from executor.training.live_bytes import LiveBytes, ModuleStack, Peak  # noqa: E402
from executor.training.measure import relative_error  # noqa: E402
from planner.hf_config import architecture_from_config, config_json  # noqa: E402
from planner.recipes import fsdp  # noqa: E402

UNDER_PREDICTION_LIMIT = -0.02

PHASES = ("init", "forward", "backward", "step")


@dataclass(frozen=True)
class Simulated:
    """The peak of the steps run and where it happened."""

    peak_bytes: int
    phase: str
    op: str
    module: str
    by_phase: dict[str, int]
    step_peak_bytes: tuple[int, ...]  # the peak of each step (init excluded from none: live bytes carry over)
    seconds: float
    # what PyTorch's CUDA caching allocator reserves at most for the same allocations and frees over the steps
    # (executor/training/caching_allocator.py): nvidia-smi's figure less the CUDA context; at least loading's peak
    # where that is counted (the simulation's own loading, a dense model built and quantised, is not replayed)
    peak_reserved_bytes: int = 0
    # the peak before the first step, where it is counted (a quantised model loaded whole, not under FSDP), else 0
    loading_bytes: int = 0


def _inplace_adam(*args: Any, **kwargs: Any) -> None:
    """DeepSpeed's multi_tensor_adam updates parameters and moments in place and allocates nothing; this stands in
    for the C++ kernel under fake tensors (shapes only: there is nothing to update)."""


def _all_ones(mask: torch.Tensor) -> bool:
    """masking_utils.fast_all of the simulated batch's mask: the same ops (sum, eq), read as the True they are."""
    _ = mask.sum() == mask.numel()
    return True


@contextlib.contextmanager
def _stand_ins(fake: bool) -> Iterator[None]:
    """Under fake tensors, what reads data gets a stand-in that allocates what the real path allocates:
    - DeepSpeed's FusedAdam kernel (a C++ extension reading data pointers) -> `_inplace_adam`, which updates in
      place and allocates nothing, as the kernel does (csrc/adam/multi_tensor_adam.cu);
    - transformers' attention-mask shortcut: it reads an all-ones mask and drops it (SDPA then runs is_causal with
      k/v unrepeated, masking_utils._ignore_causal_mask_sdpa), but treats a fake tensor as tracing and builds a
      4-D mask. The simulated batch is unpadded by construction (`_batch`), so the mask reads as all ones;
    - its packed-sequence check: given position ids (TRL's collator passes them), it reads whether any row restarts
      its positions and, if so, builds a block-diagonal mask. Every simulated row is one sequence, so none does."""
    from deepspeed.ops.adam import fused_adam
    from transformers import masking_utils

    saved = (fused_adam.multi_tensor_applier, masking_utils.is_tracing, masking_utils.fast_all,
             masking_utils.find_packed_sequence_indices)
    original_all, original_packed = masking_utils.fast_all, masking_utils.find_packed_sequence_indices
    if fake:
        fused_adam.multi_tensor_applier = _inplace_adam
        masking_utils.is_tracing = lambda tensor=None: False
        masking_utils.fast_all = lambda tensor: _all_ones(tensor) if isinstance(tensor, FakeTensor) \
            else original_all(tensor)
        masking_utils.find_packed_sequence_indices = lambda position_ids: None \
            if isinstance(position_ids, FakeTensor) else original_packed(position_ids)
    try:
        yield
    finally:
        (fused_adam.multi_tensor_applier, masking_utils.is_tracing, masking_utils.fast_all,
         masking_utils.find_packed_sequence_indices) = saved


@contextlib.contextmanager
def _functional_restored() -> Iterator[None]:
    """ZeRO-3's zero.Init swaps torch.nn.functional.linear for its memory-efficient zero3_linear_wrap (which saves
    the input of every linear, frozen or not) and leaves it so for the process (partition_parameters.py:
    _enable_mem_efficient_linear, "This will persist unless manually reset"). An executor rank is one run, so that
    is what its ZeRO-3 step runs; a simulation is one of many in a process, so torch.nn.functional is put back."""
    functional = vars(torch.nn.functional)
    saved = dict(functional)
    try:
        yield
    finally:
        for name in [name for name in functional if name not in saved]:
            del functional[name]
        functional.update(saved)


@contextlib.contextmanager
def _zero_init_skipped() -> Iterator[None]:
    """from_pretrained under a quantizer skips zero.Init whatever the DeepSpeed config (modeling_utils:
    `is_deepspeed_zero3_enabled() and not _is_quantized`): the model is built whole, as if ZeRO-3 were off."""
    from transformers.integrations import deepspeed as hf_deepspeed

    saved = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = saved


@contextlib.contextmanager
def _process_group(world_size: int) -> Iterator[None]:
    """A fake process group of world_size ranks (this process is rank 0, benchmarks.common.fake_process_group):
    collectives return at once, so ZeRO partitions and buckets as on N ranks."""
    from deepspeed.comm import comm as ds_comm
    from deepspeed.runtime.zero import partitioned_param_coordinator as coordinator
    from deepspeed.utils import groups

    # ZeRO-3 checks that every rank traced the same module order by exchanging it: a fake collective moves no data,
    # and one process standing for N ranks has nothing to compare (the check allocates a few bytes per module)
    check = coordinator.assert_ints_same_as_other_ranks
    coordinator.assert_ints_same_as_other_ranks = lambda ints: None
    # DeepSpeed caches the process groups it made in module globals; each simulation starts from import state
    saved = {name: copy.copy(value) for name, value in vars(groups).items() if name.startswith("_") and name.isupper()}
    try:
        with fake_process_group(world_size):
            ds_comm.init_distributed(dist_backend="fake", auto_mpi_discovery=False)  # as the rank's main() does
            yield
    finally:
        vars(groups).update(saved)
        coordinator.assert_ints_same_as_other_ranks = check
        ds_comm.cdb = None


def _batch(t: TrainingSpec, vocab_size: int) -> dict[str, torch.Tensor]:
    """A full micro-batch as the executor collates it: every sequence at the plan's length (the planner sizes the
    longest batch), so the attention mask is all ones. SFT (objective.Sft) brings labels; DPO (objective.Dpo, TRL's
    DataCollatorForPreference) chosen rows then rejected rows, a completion mask and, when they were computed
    before the first step, the reference log-probs."""
    shape = (t.sequences_per_micro_batch, t.sequence_length)
    ids = torch.randint(0, vocab_size, shape)
    batch = {"input_ids": ids, "attention_mask": torch.ones(shape, dtype=torch.long)}
    if t.objective is not Objective.DPO:
        return {**batch, "labels": ids.clone()}
    batch["completion_mask"] = torch.ones(shape, dtype=torch.long)
    if t.dpo.precompute_reference:
        batch["ref_chosen_logps"] = torch.zeros(t.micro_batch_size)
        batch["ref_rejected_logps"] = torch.zeros(t.micro_batch_size)
    return batch


def _objective(t: TrainingSpec, engine: Any, config: Any, ds_config: dict[str, Any]) -> Any:
    """The executor's objective for the plan, with its DPO reference as executor.training.recipe builds it: the
    policy with its adapter off, or a separate frozen copy built like the policy."""
    from executor.training import dpo
    from executor.training.model import from_config
    from executor.training.objective import Dpo, Sft

    if t.objective is not Objective.DPO:
        return Sft(pad_token_id=0, examples=[])
    plain = Dpo(0, t.sequence_length, t.dpo, [])
    if t.dpo.precompute_reference:
        return plain
    if t.method.uses_adapters and not t.dpo_reference_model:
        return replace(plain, reference=dpo.adapter_disabled(engine))
    return replace(plain, reference=dpo.frozen_copy(from_config(config, t), ds_config))


def _executor_peaks(model: Any, t: TrainingSpec, config: Any, ds_config: dict[str, Any], vocab: int,
                    counter: LiveBytes, modules: ModuleStack, steps: int) -> list[Peak]:
    """`steps` steps of the executor's DeepSpeed engine; each step's peak."""
    import deepspeed

    from executor.training.objective import Batch

    engine, *_ = deepspeed.initialize(model=model, config=ds_config,
                                      model_parameters=[p for p in model.parameters() if p.requires_grad])
    objective = _objective(t, engine, config, ds_config)
    modules.name(engine)
    step_peaks = []
    loaded(counter)
    for _ in range(steps):
        counter.peak = Peak(counter.live_bytes)
        tensors = _batch(t, vocab)
        # Trainer._micro_step, phase by phase: its StepLoss (the loss and its graph's nodes) lives through step.
        # Python's cyclic collector runs by object counts, which fake tensors (Python objects) inflate: it is
        # off during a step and run between steps, on real and fake tensors alike, so a tensor a reference
        # cycle held would be counted the same way in both.
        gc.collect()
        gc.disable()
        try:
            counter.set_phase("forward")
            step = objective.loss(engine, Batch(tensors, tensors["input_ids"].numel()))
            counter.set_phase("backward")
            engine.backward(step.loss)
            counter.set_phase("step")
            engine.step()
            del step, tensors
        finally:
            gc.enable()
        counter.set_phase("init")
        step_peaks.append(counter.peak)
    return step_peaks


def simulate(config_json: dict[str, Any], t: TrainingSpec, world_size: int = 1, *, fake: bool = True,
             steps: int = 2) -> Simulated:
    """Run `steps` executor training steps of the model `config_json` (a config.json's dict) and count live bytes."""
    import peft  # noqa: F401 - imported before the count and fake mode: its modules make tensors as they load
    import transformers
    from transformers.integrations import HfDeepSpeedConfig

    from executor.training.model import from_config, prepare_model, quantization

    started = time.perf_counter()
    config = transformers.AutoConfig.for_model(**config_json)
    ds_config = deepspeed_config(t, world_size)
    modules = ModuleStack()
    allocator = CachingAllocator()
    counter = LiveBytes(modules, allocator)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fake_mode = contextlib.ExitStack()
    if fake:
        fake_mode.enter_context(swappable(mode))
        fake_mode.enter_context(mode)
        fake_mode.enter_context(Scalars())
    # the executor's ranks join a process group, as do the Trainer recipes under DeepSpeed; on one GPU without
    # DeepSpeed they run without one
    deepspeed = t.recipe is Recipe.TUNEFLEET or t.zero_stage > 0
    ranks = _process_group(world_size) if deepspeed else contextlib.nullcontext()
    arguments = contextlib.nullcontext() if t.recipe in (Recipe.TUNEFLEET, Recipe.TORCHTUNE) else \
        trainer_arguments(t, world_size)
    dynamic_map = real_dynamic_map() if t.method is Method.QLORA else contextlib.nullcontext()
    with dynamic_map, _functional_restored(), ranks, as_on_cuda(), _stand_ins(fake), fake_mode, counter, \
            modules, kernels_as_on_cuda(t.method), arguments as trainer_args:
        torch.manual_seed(0)
        # ZeRO-3 partitions the weights as they are made: the Trainer's arguments say so for its recipes
        zero3_loading = HfDeepSpeedConfig(ds_config) if t.zero_stage == 3 and t.recipe is Recipe.TUNEFLEET else None
        bnb_config = quantization(t)
        if t.recipe is Recipe.TORCHTUNE:  # torchtune builds the model itself, from its own modules
            step_peaks = torchtune_peaks(architecture_from_config(json.dumps(config_json)), t, counter, steps, loaded)
            return _simulated(step_peaks, started, allocator)
        if bnb_config is None:
            model = from_config(config, t)
        else:
            with _zero_init_skipped():
                model = quantised(from_config(config, t), bnb_config)
        counter.peak = Peak(counter.live_bytes)  # loaded as from_pretrained leaves the model: loading counts from here
        vocab = getattr(config, "vocab_size", None) or config.get_text_config().vocab_size
        if t.recipe is Recipe.HF_TRAINER:
            model = hf_trainer_model(model, t, quantized=bnb_config is not None)
            modules.name(model)
            step_peaks = hf_trainer_peaks(model, trainer_args, t, vocab, counter, steps)
        elif t.recipe is Recipe.TRL_SFT:
            step_peaks = trl_sft_peaks(model, trainer_args, t, vocab, counter, steps, modules)
        elif t.recipe is Recipe.TRL_DPO:
            # a full fine-tune's reference: the model loaded again, as the user's script hands it to DPOTrainer
            reference = from_config(config, t) if t.uses_reference_model else None
            step_peaks = trl_dpo_peaks(model, reference, trainer_args, t, counter, steps, modules)
        else:
            model = prepare_model(model, t, quantized=bnb_config is not None)
            step_peaks = _executor_peaks(model, t, config, ds_config, vocab, counter, modules, steps)
        del zero3_loading, model
    # a quantised model is on the GPU whole, as from_pretrained quantises it weight by weight, before what loading
    # does next (PEFT's upcast, DeepSpeed's partitioning); a dense one is built by from_config, not as from_pretrained
    # reads it, and FSDP shards a quantised one as it places it
    loading = counter.loading_peak if bnb_config is not None and not fsdp(t) else None
    return _simulated(step_peaks, started, allocator, loading)


def _simulated(step_peaks: list[Peak], started: float, allocator: CachingAllocator,
               loading: Peak | None = None) -> Simulated:
    """The highest of the steps' peaks and, where it is counted, loading's."""
    loading_bytes = loading.bytes if loading else 0
    peak = max([*step_peaks, *([loading] if loading else [])], key=lambda p: p.bytes)
    return Simulated(peak.bytes, peak.phase, peak.op, peak.module, peak.by_phase,
                     tuple(p.bytes for p in step_peaks), time.perf_counter() - started,
                     max(allocator.peak_reserved_bytes, loading_bytes), loading_bytes)


def _third_party_reserved(results: list[dict[str, Any]]) -> None:
    """The replayed reserved peak plus what the planner holds outside the allocator and cuBLAS's workspace against what
    nvidia-smi showed for the same configuration (one-GPU Trainer rows: no NCCL)."""
    from benchmarks.common import print_table
    from planner.constants import CUBLAS_WORKSPACE_BYTES, TRAINING_OUTSIDE_ALLOCATOR_BYTES

    with PUBLIC.open() as f:
        measured = list(csv.DictReader(f))
    table = []
    for r in results:
        if r["row"] in THIRD_PARTY_RESERVED and int(r["simulated_reserved_bytes"]):
            index = THIRD_PARTY_RESERVED[r["row"]]
            smi = float(measured[index]["measured_peak_gib_per_gpu"]) * GiB
            replayed = int(r["simulated_reserved_bytes"]) + TRAINING_OUTSIDE_ALLOCATOR_BYTES + CUBLAS_WORKSPACE_BYTES
            table.append([index, r["row"], f"{smi / GiB:.2f}", f"{replayed / GiB:.2f}",
                          f"{relative_error(smi, replayed):+.1%}"])
    if table:
        print_table("the replayed reserved peak + CUDA context vs nvidia-smi on the same configuration",
                    ["public row", "configuration", "nvidia-smi GiB", "replayed + context", "error"], table)


def planned_bytes(row: Row, catalog: Any) -> tuple[int, int]:
    """The planner's (allocated, reserved) prediction as fake tensors see it: Fit's total less the CUDA context,
    cuBLAS's workspace (which only a real GPU allocates) and the allocator's slack, and less the first two only."""
    from planner.memory import per_gpu_memory

    hardware = Hardware(gpu=catalog.gpu("h100-sxm-80gb"), gpus_per_node=row.world_size)
    planned = per_gpu_memory(catalog.model(row.model), row.training, hardware)
    unseen = planned.cuda_context_bytes + planned.cuda_workspace_bytes
    return planned.allocated_bytes - planned.cuda_workspace_bytes, planned.total_bytes - unseen


def _result(row: Row, simulated_bytes: int, reserved_bytes: int, peak_at: str, seconds: float,
            catalog: Any) -> dict[str, Any]:
    allocated, reserved = planned_bytes(row, catalog)
    return {"row": row.label, "simulated_bytes": simulated_bytes, "planned_bytes": allocated,
            "error": relative_error(simulated_bytes, allocated), "peak_at": peak_at, "seconds": round(seconds, 1),
            "simulated_reserved_bytes": reserved_bytes, "planned_reserved_bytes": reserved,
            "reserved_error": relative_error(reserved_bytes, reserved) if reserved_bytes else math.nan}


def run_row(row: Row, catalog: Any) -> dict[str, Any]:
    """One row: the planner's allocated and reserved predictions against the simulated peaks."""
    simulated = simulate(config_json(catalog.model(row.model).architecture), row.training, row.world_size)
    return _result(row, simulated.peak_bytes, simulated.peak_reserved_bytes, f"{simulated.phase}:{simulated.op}",
                   simulated.seconds, catalog)


def _in_child(row: Row, results: Any) -> None:
    from planner.catalog import default_catalog

    results.put(run_row(row, default_catalog()))


def _isolated(row: Row) -> dict[str, Any]:
    """One row in a forked child (torch, transformers and DeepSpeed already imported): a crash or a leak of one
    row's run cannot take the table with it. A torchtune row runs in .venv-torchtune
    (benchmarks/torchtune_recipe.py), a row on an older transformers in .venv-legacy (benchmarks/legacy_trainer.py)."""
    import multiprocessing

    if row.training.recipe is Recipe.TORCHTUNE:
        try:
            return dict(in_torchtune_venv("benchmarks.simulate", "--row", row.label))
        except VenvError as e:
            print(e, file=sys.stderr)
            return _failed(row, "failed: .venv-torchtune")
    if row.training.transformers_version:
        from planner.catalog import default_catalog

        try:
            legacy = in_venv(LEGACY, "benchmarks.legacy_trainer", "--row", row.label)
        except VenvError as e:
            print(e, file=sys.stderr)
            return _failed(row, "failed: .venv-legacy")
        return _result(row, legacy["simulated_bytes"], legacy["simulated_reserved_bytes"], legacy["peak_at"],
                       legacy["seconds"], default_catalog())

    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    child = ctx.Process(target=_in_child, args=(row, results))
    child.start()
    while child.is_alive() or not results.empty():
        try:
            return dict(results.get(timeout=1))
        except queue.Empty:
            continue
    child.join()
    return _failed(row, f"failed: exit {child.exitcode}")


def _failed(row: Row, why: str) -> dict[str, Any]:
    return {"row": row.label, "simulated_bytes": 0, "planned_bytes": 0, "error": math.nan, "peak_at": why,
            "seconds": 0.0, "simulated_reserved_bytes": 0, "planned_reserved_bytes": 0, "reserved_error": math.nan}


def _preimport() -> None:
    """Everything a row imports, imported once here before the rows fork: faster, and a row runs the code the table
    started with even if the tree changes meanwhile."""
    import importlib

    for name in ("deepspeed", "transformers", "transformers.masking_utils", "transformers.integrations",
                 "deepspeed.ops.adam.fused_adam", "deepspeed.runtime.zero.partitioned_param_coordinator",
                 "deepspeed.utils.groups", "deepspeed.comm.comm", "torch.testing._internal.distributed.fake_pg",
                 "executor.training.model", "executor.training.objective", "planner.catalog", "planner.memory"):
        importlib.import_module(name)


def _simulated_rows(match: str, only: set[str] | None = None) -> list[dict[str, Any]]:
    _preimport()
    rows = [r for r in table_rows() if match in r.label and (only is None or r.label in only)]
    results = []
    for i, row in enumerate(rows, 1):
        print(f"[{i}/{len(rows)}] {row.label}", file=sys.stderr, flush=True)
        results.append(_isolated(row))
        r = results[-1]
        print(f"    {r['error']:+.1%} at {r['peak_at']}; reserved {int(r['simulated_reserved_bytes']) / GiB:.2f} GiB, "
              f"planned {int(r['planned_reserved_bytes']) / GiB:.2f} ({float(r['reserved_error']):+.1%}) "
              f"({r['seconds']:.0f} s)", file=sys.stderr, flush=True)
    return results


def replanned(match: str) -> list[dict[str, Any]]:
    """The last table's simulated peaks (they depend on the executor's code, not the planner's) against the
    planner as it is now: seconds, not half an hour, after a change to the memory model."""
    from planner.catalog import default_catalog

    catalog = default_catalog()
    by_label = {r.label: r for r in table_rows()}
    with RESULTS_CSV.open() as f:
        stored = [r for r in csv.DictReader(f) if match in r["row"] and r["row"] in by_label]
    return [_result(by_label[r["row"]], int(r["simulated_bytes"]), int(r.get("simulated_reserved_bytes") or 0),
                    r["peak_at"], float(r["seconds"]), catalog)
            if int(r["simulated_bytes"]) else {**r, "error": math.nan} for r in stored]


def _table(results: list[dict[str, Any]], write: bool) -> int:
    from benchmarks.common import print_table, write_csv

    errors = [r["error"] for r in results if not math.isnan(r["error"])]
    print_table("planner allocated and reserved predictions vs the executor's step simulated at full size (fake "
                "tensors; reserved: PyTorch's caching allocator replayed on the same allocations)",
                ["configuration", "simulated GiB", "planned GiB", "error", "peak at", "reserved GiB", "planned",
                 "error"],
                [[r["row"], f"{int(r['simulated_bytes']) / GiB:.2f}", f"{int(r['planned_bytes']) / GiB:.2f}",
                  f"{r['error']:+.1%}", r["peak_at"], f"{int(r['simulated_reserved_bytes']) / GiB:.2f}",
                  f"{int(r['planned_reserved_bytes']) / GiB:.2f}", f"{float(r['reserved_error']):+.1%}"]
                 for r in results])
    failed = len(results) - len(errors)
    under = sum(e < UNDER_PREDICTION_LIMIT for e in errors)
    print(f"{len(errors)} rows: median |error| {statistics.median(abs(e) for e in errors):.1%}, worst "
          f"{max(errors, key=abs):+.1%}, under-predicted by more than {-UNDER_PREDICTION_LIMIT:.0%}: {under}"
          f"{f', {failed} failed to run' if failed else ''} "
          "(goal: median <= 1 %, worst <= 3 %, none under by more than 2 %)")
    by_label = {r.label: r for r in table_rows()}
    for regime, wanted in (("ZeRO 0-2", lambda z: z < 3), ("ZeRO 3", lambda z: z == 3)):
        found = [r["error"] for r in results if not math.isnan(r["error"]) and r["row"] in by_label
                 and wanted(by_label[r["row"]].training.zero_stage)]
        if found:  # planner/constants.py SIMULATED_ERROR_* are these figures
            print(f"  {regime}: {len(found)} rows, truth above the plan by up to {max(0.0, -min(found)):.1%}, "
                  f"below it by up to {max(0.0, max(found)):.1%}")
    reserved = [float(r["reserved_error"]) for r in results if not math.isnan(float(r["reserved_error"]))]
    if reserved:
        print(f"reserved: {len(reserved)} rows, median |error| {statistics.median(abs(e) for e in reserved):.1%}, "
              f"worst {max(reserved, key=abs):+.1%}, under-predicted by more than {-UNDER_PREDICTION_LIMIT:.0%}: "
              f"{sum(e < UNDER_PREDICTION_LIMIT for e in reserved)}")
    _third_party_reserved(results)
    if write:
        path = write_csv(RESULTS_CSV.name, list(results[0]), [list(r.values()) for r in results])
        print(f"wrote {path}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="The planner's allocated-memory prediction against the executor's own "
                                            "step simulated at full size under fake tensors (see the module doc).")
    p.add_argument("--match", default="", help="simulate only the rows whose label contains this text (e.g. "
                                               "'Llama-3.1-8B lora' or ' z3 '); the others keep their results in "
                                               f"{RESULTS_CSV}, compared with the planner as it is now")
    p.add_argument("--replan", action="store_true",
                   help=f"compare the planner with the simulated peaks stored in {RESULTS_CSV} instead of "
                        "simulating again (after a change to the planner only), and update its planned columns")
    p.add_argument("--rerun-failed", action="store_true",
                   help=f"simulate only the rows {RESULTS_CSV} records as failed or lacks, and update it")
    p.add_argument("--row", help="simulate the one row with this label and print its result as JSON (how a torchtune "
                                 "row runs in .venv-torchtune)")
    a = p.parse_args(argv)
    if a.row:
        from planner.catalog import default_catalog

        row = next((r for r in table_rows() if r.label == a.row), None)
        if row is None:
            p.error(f"no row is labelled {a.row!r}")
        print(json.dumps(run_row(row, default_catalog())))
        return 0
    if a.replan:
        return _table(replanned(a.match), write=not a.match)
    if not a.match and not a.rerun_failed:
        return _table(_simulated_rows(""), write=True)
    stored = {r["row"]: r for r in replanned("")} if RESULTS_CSV.exists() else {}
    todo = {r.label for r in table_rows() if (a.match and a.match in r.label) or r.label not in stored
            or math.isnan(float(stored[r.label]["error"]))}
    fresh = {r["row"]: r for r in _simulated_rows("", todo)}
    return _table([fresh.get(r.label) or stored[r.label] for r in table_rows()], write=True)

if __name__ == "__main__":
    prepare()  # set up as a training process is (executor.training.process)
    sys.exit(main())

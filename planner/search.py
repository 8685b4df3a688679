"""Recommend: search the catalog for configurations that fit and rank them by cost and time."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace

from common.errors import AbandonedError
from contract.model import ModelSpec
from contract.schema import GpuSpec, Hardware, Method, Offload, Precision, Sharding, TrainingSpec, Workload
from planner import recipes
from planner.catalog import Catalog
from planner.estimate import Estimate, calibrated, estimate
from planner.fit import FitResult, fit, max_micro_batch
from planner.memo import memo
from planner.memory import MEMORY_CACHE_ENTRIES, host_memory

GPU_COUNTS = (1, 2, 4, 8)


class RankBy(enum.Enum):
    COST = "cost"
    TIME = "time"
    PARETO = "pareto"


class Rejected(enum.Enum):
    DOES_NOT_FIT = "does-not-fit"
    HOST_MEMORY = "host-memory"
    OVER_BUDGET = "over-budget"
    OVER_DEADLINE = "over-deadline"
    NO_PRICE = "no-price"
    UNSUPPORTED = "unsupported"
    DOMINATED = "dominated"


@dataclass(frozen=True)
class Constraints:
    max_cost_usd: float | None = None
    max_duration_s: float | None = None
    allowed_gpus: tuple[str, ...] = ()
    allowed_providers: tuple[str, ...] = ()
    max_gpus: int = 8
    allow_spot: bool = False
    allowed_methods: tuple[Method, ...] = ()
    rank_by: RankBy = RankBy.COST
    allow_tight: bool = False  # False: candidates whose likely range passes the GPU's memory rank after safe ones


@dataclass(frozen=True)
class Candidate:
    fit: FitResult
    estimate: Estimate
    pareto_optimal: bool = False


@dataclass(frozen=True)
class Rejection:
    gpu: str
    gpu_count: int
    reason: Rejected
    detail: str


@dataclass(frozen=True)
class Recommendation:
    candidates: tuple[Candidate, ...]
    rejections: tuple[Rejection, ...]
    evaluated: int


def _layouts(t: TrainingSpec, n: int) -> list[tuple[int, Offload]]:
    """ZeRO stage and offload choices, cheapest in communication first: FSDP's FULL_SHARD alone where FSDP shards."""
    if t.sharding is Sharding.FSDP:
        return [(3, Offload.NONE)]
    if n == 1:
        out = [(0, Offload.NONE), (2, Offload.OPTIMIZER)]
    else:
        out = [(1, Offload.NONE), (2, Offload.NONE), (3, Offload.NONE), (3, Offload.OPTIMIZER)]
    if not t.method.quantises:
        out.append((3, Offload.ALL))
    return out


# Grid specs are derived once per base spec and rank count, not per GPU: the same few dozen serve the whole
# catalog. Keys are frozen specs bounded by contract.limits.
GRID_CACHE_ENTRIES = 1024


@memo(GRID_CACHE_ENTRIES)
def _layout_specs(base: TrainingSpec, n: int) -> tuple[TrainingSpec, ...]:
    """The base spec under each checkpointing, ZeRO stage and offload choice for `n` ranks."""
    return tuple(replace(base, gradient_checkpointing=ckpt, zero_stage=stage, offload=offload)
                 for ckpt in (False, True) for stage, offload in _layouts(base, n))


@memo(MEMORY_CACHE_ENTRIES)
def _at_micro_batch(t: TrainingSpec, mb: int, global_batch: int) -> TrainingSpec:
    """`t` at micro-batch `mb`, accumulating enough micro-batches to keep the global batch."""
    return replace(t, micro_batch_size=mb, gradient_accumulation_steps=max(1, -(-global_batch // mb)))


def _hardware_options(catalog: Catalog, c: Constraints) -> list[Hardware]:
    allowed = {catalog.gpu(name, "constraints.allowed_gpus").name for name in c.allowed_gpus}
    out: list[Hardware] = []
    for gpu in catalog.gpus:
        if allowed and gpu.name not in allowed:
            continue
        price = gpu.spot_hourly_usd if c.allow_spot and gpu.spot_hourly_usd else gpu.on_demand_hourly_usd
        for n in GPU_COUNTS:
            if n <= c.max_gpus:
                out.append(Hardware(gpu=gpu, gpus_per_node=n, host_memory_bytes=gpu.host_memory_per_gpu_bytes * n,
                                     hourly_usd_per_gpu=price, spot=c.allow_spot and bool(gpu.spot_hourly_usd),
                                     provider="catalog"))
    for flavor in catalog.flavors:
        if flavor.accelerator != "gpu" or flavor.gpu_count > c.max_gpus:
            continue
        gpu = catalog.gpu(flavor.gpu)
        if allowed and gpu.name not in allowed:
            continue
        if c.allowed_providers and flavor.provider not in c.allowed_providers:
            continue
        out.append(Hardware(gpu=gpu, gpus_per_node=flavor.gpu_count, host_memory_bytes=flavor.host_memory_bytes,
                             hourly_usd_per_gpu=flavor.hourly_usd / flavor.gpu_count, provider=flavor.provider,
                             flavor=flavor.name))
    if c.allowed_providers:
        out = [hw for hw in out if hw.provider in c.allowed_providers]
    return out


@dataclass(frozen=True)
class _Option:
    """A hardware option's fastest fitting spec and its estimate; its full Fit is built only if it is shown."""

    training: TrainingSpec
    hardware: Hardware
    estimate: Estimate


def _best_layout(model: ModelSpec, base: TrainingSpec, hw: Hardware,
                 workload: Workload) -> tuple[_Option | None, Rejected, str, int]:
    """Fastest fitting layout for one hardware option; or why none fits."""
    best: _Option | None = None
    host_blocked = False
    global_batch = base.micro_batch_size * base.gradient_accumulation_steps
    layouts = tuple(layout for layout in _layout_specs(base, hw.world_size)
                    if recipes.covers(model.architecture, layout, hw.world_size))
    if not layouts:
        return None, Rejected.DOES_NOT_FIT, f"recipe {base.recipe.value} is not modelled on this layout", 0
    for layout in layouts:
        mb = min(max_micro_batch(model, layout, hw), base.micro_batch_size)
        if mb == 0:
            continue
        t = _at_micro_batch(layout, mb, global_batch)
        if not host_memory(model, t, hw).fits:
            host_blocked = True
            continue
        est = estimate(model, t, hw, workload)
        if best is None or est.duration_s < best.estimate.duration_s:
            best = _Option(t, hw, est)
    if best is None:
        reason = Rejected.HOST_MEMORY if host_blocked else Rejected.DOES_NOT_FIT
        detail = "host RAM too small for the offload that would fit" if host_blocked else \
            "no ZeRO stage, offload or checkpointing choice fits at micro-batch 1"
        return None, reason, detail, len(layouts)
    return best, Rejected.DOES_NOT_FIT, "", len(layouts)


def _pareto_flags(options: list[_Option]) -> list[bool]:
    """Whether each option is Pareto-optimal in (cost, duration): no other is at most as dear and as slow and
    better in one. One sort and a sweep over the distinct points, cheapest first."""
    points = [(o.estimate.cost_usd, o.estimate.duration_s) for o in options]
    fastest_before = float("inf")  # the shortest duration among cheaper-or-equal distinct points seen so far
    optimal: dict[tuple[float, float], bool] = {}
    for point in sorted(set(points)):
        optimal[point] = fastest_before > point[1]
        fastest_before = min(fastest_before, point[1])
    return [optimal[p] for p in points]


def half_precision(gpu: GpuSpec) -> Precision:
    """The precision a request that names none gets: bf16 mixed precision, or fp16 on GPUs without bf16 (T4, V100,
    RTX 20xx)."""
    return Precision.BF16 if gpu.supports_bf16 else Precision.FP16


def recommend(model: ModelSpec, base: TrainingSpec, workload: Workload, constraints: Constraints,
              catalog: Catalog, limit: int = 10, should_stop: Callable[[], bool] = lambda: False,
              auto_precision: bool = False) -> Recommendation:
    """Every hardware option, ranked; `should_stop` is asked before each option (the caller may have left). With
    `auto_precision` each option trains in its GPU's half precision (`half_precision`)."""
    methods = constraints.allowed_methods or (base.method,)
    candidates: list[_Option] = []
    rejections: list[Rejection] = []
    evaluated = 0
    for hw in _hardware_options(catalog, constraints):
        if should_stop():
            raise AbandonedError(f"recommend stopped after {evaluated} configurations: the caller left")
        label = hw.flavor or hw.gpu.name
        if hw.hourly_usd_per_gpu <= 0:
            rejections.append(Rejection(label, hw.world_size, Rejected.NO_PRICE,
                                        "no price on record; pass hardware.hourly_usd_per_gpu to plan on it"))
            continue
        option = _with_precision(base, half_precision(hw.gpu)) if auto_precision else base
        if not hw.gpu.runs(option.precision):
            rejections.append(Rejection(label, hw.world_size, Rejected.UNSUPPORTED,
                                        f"{hw.gpu.display_name} has no bf16; request fp16 to include it"))
            continue
        found: _Option | None = None
        why, detail = Rejected.DOES_NOT_FIT, ""
        for method in methods:
            best, why, detail, n = _best_layout(model, _with_method(option, method), hw, workload)
            evaluated += n
            if best is not None and (found is None or best.estimate.cost_usd < found.estimate.cost_usd):
                found = best
        if found is not None:
            found = replace(found, estimate=calibrated(found.estimate, catalog.calibration(hw.gpu.name)))
        if found is None:
            rejections.append(Rejection(label, hw.world_size, why, detail))
        elif constraints.max_cost_usd is not None and found.estimate.cost_usd > constraints.max_cost_usd:
            rejections.append(Rejection(label, hw.world_size, Rejected.OVER_BUDGET,
                                        f"${found.estimate.cost_usd:,.2f} exceeds the ${constraints.max_cost_usd:,.2f} "
                                        "budget"))
        elif constraints.max_duration_s is not None and found.estimate.duration_s > constraints.max_duration_s:
            rejections.append(Rejection(label, hw.world_size, Rejected.OVER_DEADLINE,
                                        f"{found.estimate.duration_s / 3600:,.1f} h exceeds the "
                                        f"{constraints.max_duration_s / 3600:,.1f} h deadline"))
        else:
            candidates.append(found)
    ranked = list(zip(candidates, _pareto_flags(candidates), strict=True))
    if constraints.rank_by is RankBy.TIME:
        ranked.sort(key=lambda c: (c[0].estimate.duration_s, c[0].estimate.cost_usd))
    elif constraints.rank_by is RankBy.PARETO:
        ranked.sort(key=lambda c: (not c[1], c[0].estimate.cost_usd, c[0].estimate.duration_s))
    else:
        ranked.sort(key=lambda c: (c[0].estimate.cost_usd, c[0].estimate.duration_s))
    # Fits are built for what is shown only; without allow_tight, a tight one waits until `limit` safe ones are found
    # (or none are left), each group in rank_by's order.
    safe: list[Candidate] = []
    tight: list[Candidate] = []
    for o, optimal in ranked:
        shown = Candidate(fit(model, o.training, o.hardware, catalog), o.estimate, optimal)
        (tight if shown.fit.tight and not constraints.allow_tight else safe).append(shown)
        if len(safe) >= limit:
            break
    return Recommendation(tuple((safe + tight)[:limit]), tuple(rejections), evaluated)


@memo(GRID_CACHE_ENTRIES)
def _with_method(t: TrainingSpec, method: Method) -> TrainingSpec:
    return t if t.method is method else replace(t, method=method)


@memo(GRID_CACHE_ENTRIES)
def _with_precision(t: TrainingSpec, precision: Precision) -> TrainingSpec:
    return t if t.precision is precision else replace(t, precision=precision)

"""The planner's caches change no answer: every Fit and Recommend computed with every cache emptied before it is
byte for byte the answer computed warm, after every other answer has filled the caches (a key that left out a field
the answer depends on would hand one spec another's memory)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from contract.model import ModelSpec
from contract.schema import Hardware, Method, Objective, Offload, TrainingSpec, Workload
from planner import convert, memo
from planner.catalog import default_catalog
from planner.estimate import estimate
from planner.fit import fit
from planner.search import Constraints, RankBy, recommend

CATALOG = default_catalog()
METHODS = (Method.FULL, Method.LORA, Method.QLORA, Method.LORA_8BIT)
# (ZeRO stage, offload, GPUs): every stage, on one GPU and on several
LAYOUTS = ((0, Offload.NONE, 1), (1, Offload.NONE, 2), (2, Offload.NONE, 4), (2, Offload.OPTIMIZER, 1),
           (3, Offload.NONE, 8), (3, Offload.OPTIMIZER, 2))


def _specs(model: ModelSpec) -> list[tuple[TrainingSpec, Hardware]]:
    out = []
    for method in METHODS:
        for stage, offload, gpus in LAYOUTS:
            if method is Method.LORA_8BIT and stage == 3:
                continue  # refused: ZeRO-3 shards none of an 8-bit base (planner.recipes.check)
            t = TrainingSpec(method=method, zero_stage=stage, offload=offload, micro_batch_size=2,
                             sequence_length=1024)
            out.append((t, Hardware(gpu=CATALOG.gpu("a100-80gb"), gpus_per_node=gpus, host_memory_bytes=2**40)))
    dpo = TrainingSpec(method=Method.LORA, objective=Objective.DPO, sequence_length=1024)
    out.append((dpo, Hardware(gpu=CATALOG.gpu("l4-24gb"), host_memory_bytes=2**40)))
    # does not fit on a 16 GB card: the suggestions run too
    out.append((TrainingSpec(method=Method.FULL, sequence_length=4096, gradient_checkpointing=False),
                Hardware(gpu=CATALOG.gpu("t4"), host_memory_bytes=2**36)))
    return out


def _fit_bytes(model: ModelSpec, t: TrainingSpec, hw: Hardware) -> bytes:
    return convert.fit_to_proto(fit(model, t, hw, CATALOG)).SerializeToString(deterministic=True)


def test_every_fit_of_every_catalog_model_is_the_same_cold_and_warm() -> None:
    cases = [(m, t, hw) for m in CATALOG.models for t, hw in _specs(m)]
    cold = []
    for m, t, hw in cases:
        memo.clear()
        cold.append(_fit_bytes(m, t, hw))
    assert memo.entries() > 0
    for m, t, hw in cases:  # fills the caches with every case
        _fit_bytes(m, t, hw)
    warm = [_fit_bytes(m, t, hw) for m, t, hw in reversed(cases)][::-1]
    for (m, t, hw), c, w in zip(cases, cold, warm, strict=True):
        assert c == w, f"{m.name} {t.method.value} ZeRO {t.zero_stage} on {hw.world_size} GPUs"
    suggested = fit(CATALOG.model("Qwen/Qwen2.5-7B"), *_specs(CATALOG.model("Qwen/Qwen2.5-7B"))[-1], CATALOG)
    assert not suggested.fits and suggested.suggestions, "the last case must exercise the suggestions"


GRIDS = (
    ("meta-llama/Llama-3.1-8B", TrainingSpec(method=Method.QLORA), Constraints()),
    ("meta-llama/Llama-3.1-8B", TrainingSpec(method=Method.LORA, micro_batch_size=8),
     Constraints(allowed_methods=(Method.LORA, Method.QLORA, Method.FULL), rank_by=RankBy.TIME)),
    ("Qwen/Qwen2.5-0.5B", TrainingSpec(method=Method.FULL, micro_batch_size=4),
     Constraints(max_gpus=2, allow_spot=True, rank_by=RankBy.PARETO)),
    ("mistralai/Mistral-7B-v0.1", TrainingSpec(method=Method.FULL, sequence_length=4096),
     Constraints(allowed_providers=("huggingface",))),
)


@pytest.mark.parametrize(("name", "base", "constraints"), GRIDS, ids=lambda x: getattr(x, "value", None))
def test_recommend_is_the_same_cold_and_warm_and_every_shown_fit_is_a_fresh_fit(name: str, base: TrainingSpec,
                                                                                  constraints: Constraints) -> None:
    model, workload = CATALOG.model(name), Workload(dataset_tokens=50_000_000)

    def answer() -> bytes:
        result = recommend(model, base, workload, constraints, CATALOG, limit=1000, auto_precision=True)
        return convert.recommendation_to_proto(result).SerializeToString(deterministic=True)

    memo.clear()
    cold = answer()
    for other, t, c in GRIDS:  # every grid's entries in the caches
        recommend(CATALOG.model(other), t, workload, c, CATALOG, auto_precision=True)
    assert answer() == cold

    memo.clear()
    result = recommend(model, base, workload, constraints, CATALOG, limit=1000, auto_precision=True)
    assert result.candidates
    for c in result.candidates:
        memo.clear()
        assert c.fit == fit(model, c.fit.training, c.fit.hardware, CATALOG)
        assert c.estimate == estimate(model, c.fit.training, c.fit.hardware, workload)
        # Pareto-optimal exactly when no other candidate is as cheap and as fast and better in one
        dominated = any(o.estimate.cost_usd <= c.estimate.cost_usd and o.estimate.duration_s <= c.estimate.duration_s
                        and (o.estimate.cost_usd, o.estimate.duration_s) != (c.estimate.cost_usd,
                                                                              c.estimate.duration_s)
                        for o in result.candidates)
        assert c.pareto_optimal is not dominated


def test_a_spec_replaced_by_one_field_is_another_key() -> None:
    t = TrainingSpec(method=Method.LORA)
    assert hash(replace(t, micro_batch_size=1)) == hash(t)
    assert {t: 1}.get(replace(t, lora=replace(t.lora, rank=t.lora.rank * 2))) is None


def test_the_service_answers_a_fit_the_same_cold_and_warm_and_a_caller_cannot_change_the_kept_answer() -> None:
    from tunefleet.v1 import hardware_pb2, model_pb2, planner_pb2, training_pb2

    from planner.service import Planner

    planner = Planner(CATALOG)
    requests = [planner_pb2.FitRequest(model=model_pb2.ModelRef(catalog_name=name),
                                       training=training_pb2.TrainingSpec(method=method, micro_batch_size=mb),
                                       hardware=hardware_pb2.HardwareSpec(gpu=gpu), margin_fraction=margin)
                for name in ("meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-0.5B")
                for method in (training_pb2.METHOD_LORA, training_pb2.METHOD_FULL)
                for gpu, mb, margin in (("t4", 1, 0.0), ("a100-80gb", 4, 0.1))]  # t4: fp16 chosen, with its note
    cold = []
    for request in requests:
        memo.clear()
        cold.append(planner.fit(request).SerializeToString(deterministic=True))
    for request, answer in zip(requests, cold, strict=True):
        warm = planner.fit(request)
        assert warm.SerializeToString(deterministic=True) == answer
        warm.result.notes.append("a caller's own edit")
        warm.result.per_gpu.total_bytes += 1
        assert planner.fit(request).SerializeToString(deterministic=True) == answer

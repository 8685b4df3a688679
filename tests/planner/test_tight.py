"""Issue 50 item 11: a tight answer says so truthfully — fit's note points to suggestions only when it has some,
each leaving room for the likely range — and recommend marks tight candidates and ranks them after safe ones unless
asked (allow_tight)."""

from __future__ import annotations

from clients import cli, planning_args
from contract.schema import Hardware, TrainingSpec, Workload
from contract.training import training_from_proto
from planner import convert
from planner.catalog import default_catalog
from planner.fit import fit
from planner.search import Constraints, recommend

CATALOG = default_catalog()


def _cli(*flags: str) -> tuple[TrainingSpec, Hardware]:
    """The training spec and hardware `tunefleet fit` asks for with these flags."""
    args = cli.build_parser().parse_args(["fit", *flags])
    hw = convert.hardware_from_proto(planning_args.hardware_spec(args), CATALOG)
    return training_from_proto(planning_args.training_spec(args), hw.world_size), hw


QLORA_70B, TWO_A100_40GB = _cli("--model", "meta-llama/Llama-2-70b-hf", "--method", "qlora", "--zero", "3", "--gpu",
                                "a100-40gb", "--gpus", "2")


def _tight_note(notes: tuple[str, ...]) -> str:
    return next(n for n in notes if n.startswith("tight:"))


def test_a_tight_fit_points_only_to_suggestions_it_has_and_each_leaves_room() -> None:
    model = CATALOG.model("meta-llama/Llama-2-70b-hf")
    answer = fit(model, QLORA_70B, TWO_A100_40GB, CATALOG)
    assert answer.fits and answer.tight
    assert not answer.suggestions, "loading is the peak: nothing on this GPU leaves room"
    assert "suggestion" not in _tight_note(answer.notes) and "--margin" in _tight_note(answer.notes)

    eight_b = CATALOG.model("meta-llama/Llama-3.1-8B")
    t, rtx_4090 = _cli("--model", "meta-llama/Llama-3.1-8B", "--method", "qlora", "--micro-batch", "3", "--gpu",
                       "rtx-4090")
    tight = fit(eight_b, t, rtx_4090, CATALOG)
    if tight.tight:  # Llama-3.1-8B QLoRA at micro-batch 3 on a 4090: likely 16.7-23.9 GiB of 24 GiB today
        room = tight.capacity_bytes / tight.band.high_bytes
        assert all(s.fits and s.per_gpu_total_bytes <= tight.per_gpu.total_bytes * room for s in tight.suggestions)
        said = _tight_note(tight.notes)
        assert ("take a suggestion below" in said) == bool(tight.suggestions)


def test_recommend_ranks_tight_candidates_after_safe_ones_unless_allowed() -> None:
    model = CATALOG.model("meta-llama/Llama-2-70b-hf")
    workload = Workload(dataset_tokens=10_000_000)
    allowed = recommend(model, QLORA_70B, workload, Constraints(allow_tight=True), CATALOG, limit=10).candidates
    assert allowed[0].fit.tight, "by cost alone, the cheapest option is tight (A100-40GB)"
    costs = [c.estimate.cost_usd for c in allowed]
    assert costs == sorted(costs)
    by_default = recommend(model, QLORA_70B, workload, Constraints(), CATALOG, limit=10).candidates
    assert not any(c.fit.tight for c in by_default), "ten safe options: no tight one shown"
    assert by_default[0].estimate.cost_usd > allowed[0].estimate.cost_usd
    few_safe = Constraints(allowed_gpus=("a100-40gb", "h100-sxm-80gb"))
    mixed = [c.fit.tight for c in recommend(model, QLORA_70B, workload, few_safe, CATALOG, limit=10).candidates]
    assert any(mixed) and not all(mixed) and mixed == sorted(mixed), "every safe candidate before every tight one"

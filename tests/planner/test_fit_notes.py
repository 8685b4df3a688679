"""Fit's notes: what a user running a different training stack should add."""

from __future__ import annotations

from dataclasses import replace

from common.units import gib
from contract.schema import Attention, Hardware, Method, Precision, Recipe, TrainingSpec
from planner import constants
from planner.catalog import default_catalog
from planner.fit import BF16_PURE_NOTE, HF_TRAINER_NOTE, TRL_SFT_NOTE, fit, suggestions
from planner.memory import gpu_memory, per_gpu_memory


def _hf_notes(method: Method) -> tuple[list[str], int]:
    catalog = default_catalog()
    model = catalog.model("mistralai/Mistral-7B-v0.1")
    t = TrainingSpec(method=method, micro_batch_size=4, sequence_length=4096, gradient_checkpointing=True)
    hw = Hardware(gpu=catalog.gpu("a100-80gb"))
    hf_total = per_gpu_memory(model, replace(t, recipe=Recipe.HF_TRAINER), hw).total_bytes
    return [n for n in fit(model, t, hw, catalog).notes if "--recipe hf-trainer" in n], hf_total


def test_qlora_notes_what_the_same_job_needs_under_transformers_trainer() -> None:
    notes, hf_total = _hf_notes(Method.QLORA)
    assert notes == [f"trained with transformers' Trainer + PEFT (--recipe hf-trainer) instead of tunefleet's "
                     f"executor, it needs {gib(hf_total)} per GPU: fp32 non-4-bit weights and activations "
                     "(prepare_model_for_kbit_training)"]


def test_lora_has_no_such_note() -> None:
    assert _hf_notes(Method.LORA)[0] == []


def test_a_hf_trainer_plan_says_the_executor_does_not_run_it() -> None:
    catalog = default_catalog()
    t = TrainingSpec(method=Method.QLORA, recipe=Recipe.HF_TRAINER)
    result = fit(catalog.model("meta-llama/Llama-3.1-8B"), t, Hardware(gpu=catalog.gpu("l4")), catalog)
    assert HF_TRAINER_NOTE in result.notes and "--recipe tunefleet" in HF_TRAINER_NOTE
    assert not any("instead of tunefleet's executor" in n for n in result.notes)


def test_a_trl_sft_plan_says_the_executor_does_not_run_it() -> None:
    catalog = default_catalog()
    t = TrainingSpec(method=Method.LORA, recipe=Recipe.TRL_SFT)
    result = fit(catalog.model("meta-llama/Llama-3.1-8B"), t, Hardware(gpu=catalog.gpu("l4")), catalog)
    assert TRL_SFT_NOTE in result.notes and "--recipe tunefleet" in TRL_SFT_NOTE


def test_a_logits_bound_lora_job_is_pointed_at_trl_s_fused_head_not_a_loss_the_executor_lacks() -> None:
    catalog = default_catalog()
    model = catalog.model("meta-llama/Llama-3.1-8B")
    t = TrainingSpec(method=Method.LORA, micro_batch_size=4, sequence_length=4096)
    hw = Hardware(gpu=catalog.gpu("rtx-4090"))
    found = {s.change: s for s in suggestions(model, t, hw, catalog, 1)}
    assert "use a chunked cross-entropy loss" not in found
    sft = found["--recipe trl-sft"]
    assert sft.training.recipe is Recipe.TRL_SFT
    assert sft.per_gpu_total_bytes < fit(model, t, hw, catalog).per_gpu.total_bytes


def test_bf16_pure_is_answered_with_a_note_that_the_executor_runs_bf16_instead() -> None:
    catalog = default_catalog()
    hw = Hardware(gpu=catalog.gpu("h100-sxm-80gb"))
    result = fit(catalog.model("Qwen/Qwen2.5-0.5B"), TrainingSpec(method=Method.FULL, precision=Precision.BF16_PURE),
                 hw, catalog)
    assert BF16_PURE_NOTE in result.notes and "--precision bf16" in BF16_PURE_NOTE
    mixed = fit(catalog.model("Qwen/Qwen2.5-0.5B"), TrainingSpec(method=Method.FULL), hw, catalog)
    assert BF16_PURE_NOTE not in mixed.notes
    assert result.per_gpu.optimizer_bytes < mixed.per_gpu.optimizer_bytes, "no fp32 master copy in bf16-pure"


def test_suggestions_offer_the_strong_levers_and_the_smallest_gpu_that_runs_the_job() -> None:
    catalog = default_catalog()
    model = catalog.model("Qwen/Qwen2.5-1.5B")
    # bf16 asked for on a T4: the precision is the problem, not memory; every suggestion that stays on the T4 must
    # change it, and the smallest other GPU is a smaller card with bf16, not the next larger one
    t4 = Hardware(gpu=catalog.gpu("t4"), host_memory_bytes=64 * 2**30)
    on_t4 = fit(model, TrainingSpec(method=Method.LORA, sequence_length=2048), t4, catalog)
    assert not on_t4.fits and on_t4.per_gpu.total_bytes < catalog.gpu("t4").memory_bytes
    assert "--precision fp16" in [s.change for s in on_t4.suggestions]
    for s in on_t4.suggestions:
        assert s.hardware.gpu.name != "t4-16gb" or s.training.precision is Precision.FP16, s.change
    elsewhere = [s for s in on_t4.suggestions if s.hardware.gpu.name != "t4-16gb"]
    assert len(elsewhere) == 1 and elsewhere[0].hardware.gpu.supports_bf16
    assert elsewhere[0].hardware.gpu.memory_bytes < catalog.gpu("t4").memory_bytes
    # 27 GiB on a 24 GB card without checkpointing: a shorter sequence and fewer LoRA targets each make it fit
    job = TrainingSpec(method=Method.LORA, sequence_length=4096, gradient_checkpointing=False)
    card = Hardware(gpu=catalog.gpu("rtx-3090-24gb"), host_memory_bytes=64 * 2**30)
    assert not fit(model, job, card, catalog).fits
    fixes = {s.change for s in suggestions(model, job, card, catalog, 0) if s.fits}
    assert {"--seq-len 2048", "--lora-targets q_proj,v_proj", "enable gradient checkpointing"} <= fixes


def test_serving_in_bf16_of_either_kind_needs_a_gpu_with_bf16() -> None:
    from planner.inference import InferenceSpec, inference_fit

    catalog = default_catalog()
    model, t4 = catalog.model("Qwen/Qwen2.5-0.5B"), Hardware(gpu=catalog.gpu("t4"), host_memory_bytes=64 * 2**30)
    verdicts = {p: inference_fit(model, TrainingSpec(precision=p), t4, catalog, InferenceSpec(1, 512)).fits
                for p in (Precision.FP16, Precision.BF16, Precision.BF16_PURE)}
    assert verdicts == {Precision.FP16: True, Precision.BF16: False, Precision.BF16_PURE: False}


def test_zero3_gathers_released_experts_again_in_backward_beside_the_copy_their_forward_saved() -> None:
    """GLM-4.5-Air's experts (2.2e9 parameters a layer) outgrow stage3_max_live_parameters and a shared expert runs
    after them: ZeRO-3 releases them and gathers them again for backward while grouped_mm's saved copy stays (one
    layer's under checkpointing, every sparse layer's without). Mixtral's, as large, end their layer and stay."""
    catalog = default_catalog()
    t = TrainingSpec(method=Method.LORA, zero_stage=3, sequence_length=2048, attention=Attention.EAGER)
    glm = catalog.model("zai-org/GLM-4.5-Air").architecture
    experts = 3 * glm.num_experts * glm.hidden_size * glm.intermediate_size
    gate_up = 2 * glm.num_experts * glm.hidden_size * glm.intermediate_size
    assert gpu_memory(glm, t, 8).regathered_bytes == 2 * (experts + gate_up)
    no_ckpt = replace(t, gradient_checkpointing=False, sequence_length=256)
    assert gpu_memory(glm, no_ckpt, 8).regathered_bytes == 2 * (glm.sparse_layers * experts + gate_up)
    assert gpu_memory(glm, replace(t, zero_stage=2), 8).regathered_bytes == 0
    mixtral = catalog.model("mistralai/Mixtral-8x7B-v0.1").architecture
    assert 3 * mixtral.num_experts * mixtral.hidden_size * mixtral.intermediate_size > 10**9
    assert gpu_memory(mixtral, t, 8).regathered_bytes == 0
    r = fit(catalog.model("zai-org/GLM-4.5-Air"), t, Hardware(gpu=catalog.gpu("h100-sxm-80gb"), gpus_per_node=8),
            catalog)
    under, over = constants.SIMULATED_ERROR_ZERO3
    assert r.band.basis.startswith(f"allocated -{over:.1%}/+{under:.1%} (worst simulated ZeRO-3 rows, make bench-")


def test_the_experts_gathered_again_are_a_row_of_fit_s_table() -> None:
    from clients.render import fit_text
    from planner.convert import fit_to_proto

    catalog = default_catalog()
    hw = Hardware(gpu=catalog.gpu("h100-sxm-80gb"), gpus_per_node=8)
    t = TrainingSpec(method=Method.LORA, zero_stage=3, sequence_length=2048, attention=Attention.EAGER)
    glm = fit_to_proto(fit(catalog.model("zai-org/GLM-4.5-Air"), t, hw, catalog))
    assert glm.per_gpu.regathered_experts_bytes == gpu_memory(catalog.model("zai-org/GLM-4.5-Air").architecture, t,
                                                              8).regathered_bytes
    assert any(line.strip().startswith("experts gathered again (backward)") and
               line.endswith(gib(glm.per_gpu.regathered_experts_bytes)) for line in fit_text(glm).splitlines())
    dense = fit_to_proto(fit(catalog.model("meta-llama/Llama-3.1-70B"), t, hw, catalog))
    assert "experts gathered again" not in fit_text(dense)


def test_image_tokens_say_how_they_were_counted() -> None:
    catalog = default_catalog()
    model = catalog.model("Qwen/Qwen2-VL-7B-Instruct")
    hw = Hardware(gpu=catalog.gpu("a100-80gb"), host_memory_bytes=256 * 2**30)
    base = TrainingSpec(method=Method.LORA, micro_batch_size=1, sequence_length=2048, gradient_checkpointing=True)
    frozen = [fit(model, replace(base, image_tokens=n), hw, catalog) for n in (0, 1024, 1800)]
    assert len({f.per_gpu.total_bytes for f in frozen}) == 1, "a frozen tower keeps nothing: no change, as said"
    assert not any("image tokens" in n for n in frozen[0].notes)
    assert any(n.startswith("image tokens: 1,024 of each sequence's 2,048") and "frozen" in n for n in frozen[1].notes)
    trained = [fit(model, replace(base, image_tokens=n, train_vision_tower=True), hw, catalog) for n in (256, 1024)]
    assert trained[1].per_gpu.total_bytes > trained[0].per_gpu.total_bytes, "a trained tower's activations count"
    assert any("the vision tower trains" in n for n in trained[1].notes)

"""Fit's notes: what a user running a different training stack should add."""

from __future__ import annotations

from planner.catalog import default_catalog
from planner.fit import fit
from planner.schema import Hardware, Method, TrainingSpec


def _kbit_notes(method: Method) -> list[str]:
    catalog = default_catalog()
    model = catalog.model("mistralai/Mistral-7B-v0.1")
    t = TrainingSpec(method=method, micro_batch_size=4, sequence_length=4096, gradient_checkpointing=True)
    return [n for n in fit(model, t, Hardware(gpu=catalog.gpu("a100-80gb")), catalog).notes
            if "prepare_model_for_kbit_training" in n]


def test_qlora_notes_the_fp32_residual_stream_of_the_peft_amp_recipe() -> None:
    # 32 layers x 2 bytes x 4096 hidden x 16384 tokens = 4.0 GiB
    assert _kbit_notes(Method.QLORA) == [
        "trained with HF Trainer + PEFT prepare_model_for_kbit_training (AMP) instead of tunefleet's executor, "
        "the fp32 residual stream adds about 4.0 GiB per GPU"]


def test_lora_has_no_such_note() -> None:
    assert _kbit_notes(Method.LORA) == []

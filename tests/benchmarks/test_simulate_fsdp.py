"""transformers' Trainer sharded by PyTorch's FSDP (benchmarks/recipes.py: accelerate's own FSDP preparation on the
fake process group) peaks at the same bytes on fake tensors as on real ones. A file of its own, so the suite's
workers share the simulation tests."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

os.environ.setdefault("DS_ACCELERATOR", "cpu")

from benchmarks.simulate import simulate  # noqa: E402
from contract.schema import LoadDtype, Method, Recipe, Sharding, TrainingSpec  # noqa: E402
from tests.benchmarks.tiny import ALL, TINY_LLAMA, fake_equals_real  # noqa: E402

FSDP = [(Method.LORA, LoadDtype.BF16), (Method.FULL, LoadDtype.BF16), (Method.LORA, LoadDtype.FP32),
        (Method.QLORA, LoadDtype.BF16)]


@pytest.mark.parametrize(("method", "load"), FSDP, ids=[f"{m.value}-{d.value}" for m, d in FSDP])
def test_a_fake_trainer_step_under_fsdp_peaks_at_the_same_bytes_as_the_real_step(method: Method,
                                                                                 load: LoadDtype) -> None:
    """transformers' Trainer sharded by PyTorch's FSDP through accelerate's own preparation, on two fake ranks: the
    root unit and each decoder layer's gathered and freed by resizing their storage, which the counter follows on
    real tensors and fake alike; the weights sharded (a rank holds half of every unit's), in the dtype they were
    loaded in; QLoRA's 4-bit weights flattened with the rest (bitsandbytes recovers each view's quant state)."""
    t = TrainingSpec(method=method, micro_batch_size=2, sequence_length=32, lora=ALL, zero_stage=3,
                     recipe=Recipe.HF_TRAINER, sharding=Sharding.FSDP, load_dtype=load)
    fake = fake_equals_real(t, 2)
    unsharded = simulate(TINY_LLAMA, replace(t, zero_stage=0, sharding=Sharding.DEEPSPEED), 1)
    assert fake.by_phase["init"] < unsharded.by_phase["init"]

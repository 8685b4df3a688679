"""What the simulation tests share: a tiny Llama config, LoRA on every linear, and the real-equals-fake check."""

from __future__ import annotations

import os

os.environ.setdefault("DS_ACCELERATOR", "cpu")

from benchmarks.simulate import Simulated, simulate  # noqa: E402
from contract.schema import ALL_LINEAR, LoraSpec, TrainingSpec  # noqa: E402

TINY_LLAMA = dict(model_type="llama", vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False)
ALL = LoraSpec(target_modules=(ALL_LINEAR,))  # dropout 0.05: a dropout mask per adapter


def fake_equals_real(t: TrainingSpec, ranks: int = 1) -> Simulated:
    """The step of `t` on TINY_LLAMA, run on real tensors and on fake ones: the same per-step peaks, the same peak
    (bytes, phase and op) and the same replayed reserved peak. Returns the fake run."""
    real = simulate(TINY_LLAMA, t, ranks, fake=False)
    fake = simulate(TINY_LLAMA, t, ranks, fake=True)
    assert fake.step_peak_bytes == real.step_peak_bytes
    assert (fake.peak_bytes, fake.phase, fake.op) == (real.peak_bytes, real.phase, real.op)
    assert fake.peak_reserved_bytes == real.peak_reserved_bytes
    return fake

"""QLoRA under fake tensors (benchmarks/quantised.py): a weight quantised on fake tensors has the storage
bitsandbytes gives it on real ones, and the 4-bit matmul allocates what bitsandbytes' CUDA kernel allocates —
the dequantised weight and absmax past 4 rows, the output alone up to 4."""

from __future__ import annotations

import bitsandbytes as bnb
import pytest
import torch
import transformers
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from benchmarks.quantised import FUSED_KERNEL_MAX_ROWS, kernels_as_on_cuda, quantised, real_dynamic_map
from contract.schema import Method, TrainingSpec
from executor.training.live_bytes import LiveBytes, Peak
from executor.training.model import quantization

HIDDEN, INTERMEDIATE = 128, 256
# the layer looked at: a decoder MLP's up projection (out x in = intermediate x hidden)
OUT_FEATURES, IN_FEATURES = INTERMEDIATE, HIDDEN


def _model() -> torch.nn.Module:
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)


def _layer(model: torch.nn.Module) -> torch.nn.Module:
    return model.model.layers[0].mlp.up_proj


def _storage(weight: torch.Tensor) -> list[tuple[tuple[int, ...], torch.dtype]]:
    state = weight.quant_state
    tensors = [weight, state.absmax, state.state2.absmax, state.offset]
    return [(tuple(t.shape), t.dtype) for t in tensors]


@pytest.mark.parametrize("double_quant", [True, False])
def test_a_fake_quantised_weight_has_the_storage_of_a_real_one(double_quant: bool) -> None:
    config = quantization(TrainingSpec(method=Method.QLORA, double_quant=double_quant))
    with real_dynamic_map():
        real = _layer(quantised(_model(), config)).weight
        with FakeTensorMode(allow_non_fake_inputs=True):
            fake = _layer(quantised(_model(), config)).weight
    assert isinstance(fake, FakeTensor) and isinstance(fake, bnb.nn.Params4bit) and type(fake).__name__ == "Params4bit"
    assert fake.bnb_quantized and fake.quant_state.nested is double_quant is real.quant_state.nested
    if double_quant:
        assert _storage(fake) == _storage(real)
    else:
        assert (fake.quant_state.absmax.shape, fake.quant_state.absmax.dtype) == \
            (real.quant_state.absmax.shape, torch.float32)
    # NF4 packs two weights a byte, stored as bf16 (two bytes an element): a quarter of the elements
    assert fake.numel() == real.numel() == OUT_FEATURES * IN_FEATURES // 4 and fake.dtype is torch.bfloat16
    assert fake.to(fake.device) is fake and fake.detach().quant_state is fake.quant_state


def _matmul_peak_bytes(rows: int) -> tuple[int, torch.Tensor]:
    """The peak above the weights of one forward through the layer, on fake tensors (bitsandbytes' CPU kernels
    allocate temporaries of their own, which CUDA's do not)."""
    config = quantization(TrainingSpec(method=Method.QLORA))
    counter = LiveBytes()
    with real_dynamic_map(), FakeTensorMode(allow_non_fake_inputs=True), counter:
        layer = _layer(quantised(_model(), config))
        x = torch.zeros(rows, IN_FEATURES, dtype=torch.bfloat16)
        before = counter.live_bytes
        counter.peak = Peak(before)
        with kernels_as_on_cuda(Method.QLORA):
            out = layer(x)
    return counter.peak.bytes - before, out


def test_the_matmul_dequantises_the_weight_past_the_fused_kernels_rows() -> None:
    rows = FUSED_KERNEL_MAX_ROWS * 2
    fallback, out = _matmul_peak_bytes(rows)
    fused, _ = _matmul_peak_bytes(FUSED_KERNEL_MAX_ROWS)
    assert out.shape == (rows, OUT_FEATURES)
    blocks = OUT_FEATURES * IN_FEATURES // 64
    output_bytes = rows * OUT_FEATURES * 2
    # the dequantised bf16 weight, the absmax dequantised and offset (fp32 each), and the output
    assert fallback == OUT_FEATURES * IN_FEATURES * 2 + 2 * blocks * 4 + output_bytes
    assert fused == FUSED_KERNEL_MAX_ROWS * OUT_FEATURES * 2
    # nothing fake stays where bitsandbytes caches its code table: a real run after a simulation reads it
    assert not isinstance(bnb.functional.name2qmap["dynamic"], FakeTensor)

"""QLoRA under fake tensors: the base model quantised as transformers and bitsandbytes quantise it on a CUDA GPU,
and bitsandbytes' 4-bit matmul allocating what its CUDA kernel allocates (bitsandbytes 0.50, constraints.txt).

The executor loads a QLoRA model with transformers' bitsandbytes quantizer (executor.training.model._pretrained,
`quantization`); `quantised` does the same to the fake model simulate.py built:
- the quantizer's own `preprocess_model` replaces every nn.Linear but the ones it skips (the output head, tied
  weights, `_keep_in_fp32_modules`) with bitsandbytes' Linear4bit (transformers/integrations/bitsandbytes.py:
  replace_with_bnb_linear);
- each dense weight is then quantised as `Params4bit._quantize` quantises it on loading: `bitsandbytes.functional.
  quantize_4bit` (NF4 packed two to a byte in the quant_storage dtype, an fp32 absmax per 64 weights; nested: the
  absmax as uint8 with an fp32 absmax per 256 and an offset). bitsandbytes registers fake kernels for its ops
  (bitsandbytes/_ops.py), so this runs under fake tensors as is; what does not is Params4bit itself: torch's
  _make_subclass refuses a tensor that already has a Python object (a FakeTensor), so the fake packed weight is
  given Params4bit's class and attributes instead (`_FAKE_PARAMS4BIT`, named Params4bit as PEFT's
  prepare_model_for_kbit_training looks for it). It stays where it is: `.to` to its own device is itself.

What differs from the fake kernels, set to CUDA's way (`gemm_4bit_as_on_cuda`): bitsandbytes 0.50's 4-bit matmul
(torch.ops.bitsandbytes.gemm_4bit) has a fake kernel that allocates the output only. Its CUDA kernel picks, by the
rows it multiplies (M, the micro-batch's tokens) and the GPU (backends/cuda/ops.py: _gemm_4bit_use_custom_cuda),
between a fused kernel (the output only; always at M <= 4) and `_dequant_linear_fallback` (always past M = 1536):
the nested absmax dequantised to fp32, the offset added (a second fp32 copy; both live to the end), the whole
weight dequantised in the compute dtype, then F.linear. Past 4 rows the simulation runs the fallback's
allocations: exact past 1536 rows, an upper bound by one layer's dequantised weight between (where some GPUs run
the fused kernel). The backward dequantises the weight in Python (autograd/_functions.py: MatMul4Bit.backward ->
functional.dequantize_4bit), which the fake kernels run as is.

One more value read: bitsandbytes builds its 8-bit dynamic code table (for the nested absmax) from Python floats
read off a tensor (functional.create_dynamic_map); it is built on real tensors before fake mode and again after it
(`real_dynamic_map`), where bitsandbytes caches it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.utils._python_dispatch import TorchDispatchMode

# bitsandbytes' fused 4-bit kernel runs at most this many rows whatever the GPU (backends/cuda/ops.py:
# _GEMM_4BIT_CUSTOM_FLOOR_M, bitsandbytes 0.50.2)
FUSED_KERNEL_MAX_ROWS = 4


# what Params4bit.__new__ and _quantize set on a 4-bit weight (bitsandbytes/nn/modules.py)
_PARAMS4BIT_ATTRIBUTES = ("blocksize", "compress_statistics", "quant_type", "quant_state", "quant_storage",
                          "bnb_quantized", "module")


def _fake_params4bit_class() -> type:
    """A fake tensor that is a Params4bit: it stays where it is (`.to` its own device and dtype is itself) and its
    detached copy (nn.Module._apply wraps a fake parameter's conversion in a new Parameter) keeps its class and
    quantisation state."""
    import bitsandbytes as bnb

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        if (device is None or device == self.device) and (dtype is None or dtype == self.dtype):
            return self
        raise RuntimeError(f"a simulated 4-bit weight stays on {self.device} in {self.dtype}")

    def detach(self: Any) -> Any:
        detached = FakeTensor.detach(self)
        detached.__class__ = type(self)
        detached.__dict__.update({name: getattr(self, name) for name in _PARAMS4BIT_ATTRIBUTES})
        return detached

    return type("Params4bit", (FakeTensor, bnb.nn.Params4bit), {"to": to, "detach": detach, "__module__": __name__})


@contextlib.contextmanager
def real_dynamic_map() -> Iterator[None]:
    """bitsandbytes' dynamic code table on real tensors (it reads its own values), where functional.quantize_blockwise
    looks for it, for a simulation and again after it: under fake tensors a fake copy of it ends up cached there,
    which a later real run would read."""
    from bitsandbytes import functional

    functional.name2qmap["dynamic"] = functional.create_dynamic_map()
    try:
        yield
    finally:
        functional.name2qmap["dynamic"] = functional.create_dynamic_map()


def _packed(dense: torch.Tensor, meta_weight: Any, params_class: type) -> torch.Tensor:
    """Params4bit._quantize on a dense weight; a fake one gets quantize_4bit's result made a Params4bit."""
    import bitsandbytes as bnb

    if not isinstance(dense, FakeTensor):
        attributes = {name: getattr(meta_weight, name) for name in _PARAMS4BIT_ATTRIBUTES}
        return bnb.nn.Params4bit(dense, requires_grad=False, **attributes)._quantize(dense.device)
    packed, quant_state = bnb.functional.quantize_4bit(
        dense.contiguous(), blocksize=meta_weight.blocksize, compress_statistics=meta_weight.compress_statistics,
        quant_type=meta_weight.quant_type, quant_storage=meta_weight.quant_storage)
    weight = torch.nn.Parameter(packed, requires_grad=False)
    weight.__class__ = params_class
    weight.__dict__.update({name: getattr(meta_weight, name) for name in _PARAMS4BIT_ATTRIBUTES})
    weight.__dict__.update(quant_state=quant_state, bnb_quantized=True)
    return weight


def quantised(model: Any, bnb_config: Any) -> Any:
    """`model` (fake, dense) with its linear layers replaced and quantised as from_pretrained(quantization_config=
    bnb_config) leaves them; 4-bit only."""
    import bitsandbytes as bnb
    from transformers.quantizers import AutoHfQuantizer

    if not bnb_config.load_in_4bit:
        raise ValueError("only 4-bit (QLoRA) weights are simulated; 8-bit LoRA is not")
    quantizer = AutoHfQuantizer.from_config(bnb_config, pre_quantized=False)
    dense = {name: module for name, module in model.named_modules() if type(module) is torch.nn.Linear}
    with unset_fake_temporarily():  # Linear4bit's meta weight is a Params4bit, which cannot wrap a fake tensor
        quantizer.preprocess_model(model, device_map={"": "cpu"}, dtype=torch.bfloat16)
    params_class = _fake_params4bit_class()
    for name, module in model.named_modules():
        if isinstance(module, bnb.nn.Linear4bit):
            original = dense.pop(name)
            module.weight = _packed(original.weight.detach(), module.weight, params_class)
            module.weight.module = module
            if original.bias is not None:
                module.bias = original.bias
    quantizer.postprocess_model(model)
    model.hf_quantizer = quantizer  # as from_pretrained leaves it (Trainer checks the model is trainable with it)
    return model


class _Gemm4bitOnCuda(TorchDispatchMode):
    """torch.ops.bitsandbytes.gemm_4bit as CUDA runs it past FUSED_KERNEL_MAX_ROWS rows: bitsandbytes 0.50.2
    backends/cuda/ops.py `_dequant_linear_fallback`, allocation by allocation."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is not torch.ops.bitsandbytes.gemm_4bit.default:
            return func(*args, **kwargs)
        return _dequant_linear_fallback(*args, **kwargs)


def _dequant_linear_fallback(a: torch.Tensor, b: torch.Tensor, shape_b: list[int], absmax: torch.Tensor,
                             blocksize: int, quant_type: str, bias: torch.Tensor | None = None,
                             absmax_8bit: torch.Tensor | None = None, absmax_code: torch.Tensor | None = None,
                             absmax_offset: torch.Tensor | None = None) -> torch.Tensor:
    if a.numel() // a.shape[-1] <= FUSED_KERNEL_MAX_ROWS:
        return torch.ops.bitsandbytes.gemm_4bit.default(a, b, shape_b, absmax, blocksize, quant_type, bias=bias,
                                                        absmax_8bit=absmax_8bit, absmax_code=absmax_code,
                                                        absmax_offset=absmax_offset)
    absmax_dequantised = None  # the fallback's locals, this one included, live until it returns
    if absmax_8bit is not None:
        absmax_dequantised = torch.ops.bitsandbytes.dequantize_blockwise.default(absmax_8bit, absmax, absmax_code,
                                                                                 256, torch.float32)
        absmax = absmax_dequantised + absmax_offset
    weight = torch.ops.bitsandbytes.dequantize_4bit.default(b, absmax, blocksize, quant_type, shape_b, a.dtype)
    return torch.nn.functional.linear(a, weight, bias)


@contextlib.contextmanager
def gemm_4bit_as_on_cuda() -> Iterator[None]:
    with _Gemm4bitOnCuda():
        yield

"""QLoRA and 8-bit LoRA under fake tensors: the base model quantised as transformers and bitsandbytes quantise it on a
CUDA GPU, and bitsandbytes' 4-bit and LLM.int8 matmuls allocating what their CUDA kernels allocate (bitsandbytes
0.50, constraints.txt). 8-bit: each weight quantised as Int8Params._quantize quantises it (int8 rows, an fp32 absmax
a row; `_rows_int8`, the fake result given Int8Params' class as the 4-bit one is), and `kernels_as_on_cuda`.

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

What differs from the fake kernels, set to CUDA's way (`kernels_as_on_cuda`): bitsandbytes 0.50's 4-bit matmul
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

from contract.schema import Method
from planner.constants import LLM_INT8_OUTLIER_COLUMNS

# bitsandbytes' fused 4-bit kernel runs at most this many rows whatever the GPU (backends/cuda/ops.py:
# _GEMM_4BIT_CUSTOM_FLOOR_M, bitsandbytes 0.50.2)
FUSED_KERNEL_MAX_ROWS = 4


# what Params4bit.__new__ and _quantize set on a 4-bit weight (bitsandbytes/nn/modules.py)
_PARAMS4BIT_ATTRIBUTES = ("blocksize", "compress_statistics", "quant_type", "quant_state", "quant_storage",
                          "bnb_quantized", "module")


def _fake_params_class(base: type, attributes: tuple[str, ...], what: str) -> type:
    """A fake tensor that is a bitsandbytes parameter (`base`): it stays where it is (`.to` its own device and dtype is
    itself) and its detached copy (nn.Module._apply wraps a fake parameter's conversion in a new Parameter) keeps its
    class and quantisation `attributes`."""

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        if (device is None or device == self.device) and (dtype is None or dtype == self.dtype):
            return self
        raise RuntimeError(f"a simulated {what} weight stays on {self.device} in {self.dtype}")

    def detach(self: Any) -> Any:
        detached = FakeTensor.detach(self)
        detached.__class__ = type(self)
        detached.__dict__.update({name: getattr(self, name) for name in attributes})
        return detached

    return type(base.__name__, (FakeTensor, base), {"to": to, "detach": detach, "__module__": __name__})


def fake_params4bit_class() -> type:
    """A fake Params4bit (named so: PEFT's prepare_model_for_kbit_training looks for it)."""
    import bitsandbytes as bnb

    return _fake_params_class(bnb.nn.Params4bit, _PARAMS4BIT_ATTRIBUTES, "4-bit")


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


def _fake_int8params_class() -> type:
    """A fake Int8Params: its int8 rows as data, CB the same rows, SCB their fp32 absmax."""
    import bitsandbytes as bnb

    return _fake_params_class(bnb.nn.Int8Params, ("CB", "SCB", "has_fp16_weights"), "8-bit")


def _rows_int8(dense: torch.Tensor, params_class: type) -> torch.Tensor:
    """Int8Params._quantize on a dense weight (its fp16 copy quantised row by row); a fake one gets the result made an
    Int8Params."""
    import bitsandbytes as bnb

    if not isinstance(dense, FakeTensor):
        return bnb.nn.Int8Params(dense, requires_grad=False, has_fp16_weights=False)._quantize(dense.device)
    rows, absmax, _ = bnb.functional.int8_vectorwise_quant(dense.contiguous().to(torch.float16))
    weight = torch.nn.Parameter(rows, requires_grad=False)
    weight.__class__ = params_class
    weight.__dict__.update(CB=rows, SCB=absmax, has_fp16_weights=False)
    return weight


def quantised(model: Any, bnb_config: Any) -> Any:
    """`model` (fake, dense) with its linear layers replaced and quantised as from_pretrained(quantization_config=
    bnb_config) leaves them: 4-bit (QLoRA) or LLM.int8 (8-bit LoRA)."""
    import bitsandbytes as bnb
    from transformers.quantizers import AutoHfQuantizer

    quantizer = AutoHfQuantizer.from_config(bnb_config, pre_quantized=False)
    dense = {name: module for name, module in model.named_modules() if type(module) is torch.nn.Linear}
    with unset_fake_temporarily():  # Linear4bit's meta weight is a Params4bit, which cannot wrap a fake tensor
        quantizer.preprocess_model(model, device_map={"": "cpu"}, dtype=torch.bfloat16)
    params_class = fake_params4bit_class() if bnb_config.load_in_4bit else _fake_int8params_class()
    for name, module in model.named_modules():
        if isinstance(module, bnb.nn.Linear4bit | bnb.nn.Linear8bitLt):
            original = dense.pop(name)
            if isinstance(module, bnb.nn.Linear4bit):
                module.weight = _packed(original.weight.detach(), module.weight, params_class)
                module.weight.module = module
                module.quant_state = module.weight.quant_state  # as Params4bit._quantize leaves its module
            else:
                module.weight = _rows_int8(original.weight.detach(), params_class)
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


# 1 / 127: int8 rows back to their scale (bitsandbytes backends/default/ops.py: int8_vectorwise_dequant)
INT8_DEQUANT_SCALE = 7.874015718698502e-3


class _Int8OnCuda(TorchDispatchMode):
    """bitsandbytes' LLM.int8 matmul (autograd/_functions.py: MatMul8bitLt) as its CUDA kernels allocate, on real and
    fake tensors alike (bitsandbytes 0.50.2 backends/cuda/ops.py and backends/default/ops.py):
    - int8_vectorwise_quant: the int8 rows and fp32 row statistics; with a threshold, the input's absolute value and
      the outlier mask over it, the outlier columns (LLM_INT8_OUTLIER_COLUMNS) and their zeroing in the rows;
    - int8_mixed_scaled_mm: the outlier columns of the input gathered and the weight's dequantised, the int8 matmul
      (an int32 product, dequantised into fp16 and cast to the input's dtype) and its copy with the outliers' matmul
      added;
    - int8_scaled_mm: the int32 product, its fp16 dequantisation and the cast.
    The CPU's kernels compute in fp32 with temporaries of their own; the stand-ins allocate what CUDA's do and compute
    nothing: zeros (the simulation counts bytes; zeros keep a real step's gradient norm finite, so its optimizer
    steps as a fake one does)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        ops = torch.ops.bitsandbytes
        if func is ops.int8_vectorwise_quant.default:
            return _vectorwise_quant(*args, **kwargs)
        if func is ops.int8_mixed_scaled_mm.default:
            return _mixed_scaled_mm(*args, **kwargs)
        if func is ops.int8_scaled_mm.default:
            return _scaled_mm(*args, **kwargs)
        return func(*args, **kwargs)


def _vectorwise_quant(a: torch.Tensor, threshold: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, Any]:
    rows = a.numel() // a.shape[-1]
    row_stats = torch.zeros(rows, device=a.device, dtype=torch.float32)
    out_row = torch.zeros(a.shape, device=a.device, dtype=torch.int8)
    if threshold <= 0.0:
        return out_row, row_stats, None
    outliers = a.abs() >= threshold
    columns = outliers.any(dim=0)
    del outliers, columns
    outlier_cols = torch.arange(LLM_INT8_OUTLIER_COLUMNS, device=a.device)
    if rows > 1:
        out_row[:, outlier_cols] = 0
    return out_row, row_stats, outlier_cols


def _scaled_mm(a: torch.Tensor, b: torch.Tensor, row_stats: torch.Tensor, col_stats: torch.Tensor,
               bias: torch.Tensor | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
    product = torch.zeros((*a.shape[:-1], b.shape[0]), device=a.device, dtype=torch.int32)
    dequantised = torch.zeros_like(product, dtype=torch.float16)
    del product
    return dequantised.to(dtype or torch.float16)


def _mixed_scaled_mm(a: torch.Tensor, ca: torch.Tensor, cb: torch.Tensor, sca: torch.Tensor, scb: torch.Tensor,
                     outlier_cols: torch.Tensor | None = None,
                     bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    if outlier_cols is None or not outlier_cols.numel():
        return _scaled_mm(ca, cb, sca, scb, bias, a.dtype), torch.empty(0, device=a.device, dtype=a.dtype)
    sub_a = a[:, outlier_cols].contiguous()
    # int8_vectorwise_dequant's default kernel, which CUDA runs too
    sub_b = (cb[:, outlier_cols].contiguous() * scb.view(-1, 1) * INT8_DEQUANT_SCALE).to(a.dtype).t()
    output = _scaled_mm(ca, cb, sca, scb, bias, a.dtype)
    return output.addmm(sub_a, sub_b), sub_a


def fake_view_params4bit(module: Any, params_class: type) -> torch.nn.Parameter:
    """The Params4bit bitsandbytes makes of an FSDP view of a Linear4bit's weight, with the module's quant state, as a
    fake one (`params_class`: fake_params4bit_class)."""
    alias = torch.nn.Parameter(module.weight.view_as(module.weight), requires_grad=False)
    alias.__class__ = params_class
    state = module.quant_state
    alias.__dict__.update(blocksize=state.blocksize, compress_statistics=state.nested, quant_type=state.quant_type,
                          quant_storage=module.quant_storage, bnb_quantized=True, module=module, quant_state=state)
    return alias


@contextlib.contextmanager
def _quant_state_recovered_on_fakes() -> Iterator[None]:
    """FSDP replaces a Linear4bit's weight with a plain view of its flat parameter; bitsandbytes makes the view a
    Params4bit again and gives it the module's quant state (nn/modules.py: fix_4bit_weight_quant_state_from_module),
    which torch's _make_subclass refuses for a fake tensor. The stand-in makes the same alias of the view a fake
    Params4bit (what `_packed` gives a fake weight)."""
    import bitsandbytes as bnb
    from bitsandbytes.nn import modules

    original = modules.fix_4bit_weight_quant_state_from_module
    params_class = fake_params4bit_class()

    def recovered(module: Any) -> None:
        weight = module.weight
        if not isinstance(weight, FakeTensor) or isinstance(weight, bnb.nn.Params4bit):
            original(module)
            return
        module.weight = fake_view_params4bit(module, params_class)

    modules.fix_4bit_weight_quant_state_from_module = recovered
    try:
        yield
    finally:
        modules.fix_4bit_weight_quant_state_from_module = original


@contextlib.contextmanager
def _qlora_on_cuda() -> Iterator[None]:
    with _quant_state_recovered_on_fakes(), _Gemm4bitOnCuda():
        yield


def kernels_as_on_cuda(method: Method) -> contextlib.AbstractContextManager[Any]:
    """bitsandbytes' matmul of `method`'s quantised weights as its CUDA kernels allocate (nothing for a dense model)."""
    if method is Method.QLORA:
        return _qlora_on_cuda()
    if method is Method.LORA_8BIT:
        return _Int8OnCuda()
    return contextlib.nullcontext()

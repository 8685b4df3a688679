"""What a step under fake tensors needs to run as the real step runs on CUDA, shared by the simulations of today's stack
(benchmarks/simulate.py) and of a Trainer's older one (benchmarks/legacy_trainer.py): the CPU paths that allocate
differently, set to CUDA's (`as_on_cuda`), values read off fake tensors (`Scalars`) and module conversions that swap
fake parameters (`swappable`)."""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode


def cuda_dropout(input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
    """torch.nn.functional.dropout as CUDA runs it: the fused native_dropout, whose backward keeps a bool mask
    (aten/src/ATen/native/Dropout.cpp: is_fused_kernel_acceptable is true for CUDA inputs with 0 < p < 1). The CPU
    path multiplies by a noise tensor of the input's dtype, which it keeps instead: twice the bytes in bf16."""
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if p == 1.0:
        return input * 0
    return torch.ops.aten.native_dropout(input, p, True)[0]


_SDPA = torch.nn.functional.scaled_dot_product_attention


def cuda_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args: Any, dropout_p: float = 0.0,
               **kwargs: Any) -> torch.Tensor:
    """SDPA as CUDA's flash and memory-efficient kernels run it with dropout: the mask drawn inside the kernel from a
    seed, nothing per element kept; the CPU flash kernel without dropout saves the same tensors. A value head
    narrower than the query's (latent attention) sends the CPU to its math path, which keeps the S x S scores; CUDA
    runs its memory-efficient kernel, whose fake kernel stands in here (saving q, k, v as given, the output and an
    fp32 log-sum-exp per head and row)."""
    if isinstance(query, FakeTensor) and query.shape[-1] != value.shape[-1]:
        attn_mask = kwargs.get("attn_mask", args[0] if args else None)
        if attn_mask is not None or kwargs.get("enable_gqa"):
            raise RuntimeError("latent attention under SDPA is simulated causal, without a mask or grouped heads")
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, None, True, 0.0, kwargs.get("is_causal", False), scale=kwargs.get("scale"))[0]
    return _SDPA(query, key, value, *args, dropout_p=0.0, **kwargs)


@contextlib.contextmanager
def as_on_cuda() -> Iterator[None]:
    """The one place where the CPU and CUDA paths of the executor's step allocate differently, set to CUDA's:
    - dropout: CUDA's fused kernel keeps a 1-byte bool mask, the CPU path a mask in the activations' dtype
      (`cuda_dropout`);
    - SDPA: the CPU kernel (_scaled_dot_product_flash_attention_for_cpu) saves q, k, v, the output and an fp32
      log-sum-exp per head and row, as CUDA's flash and memory-efficient kernels do (they add a seed and an
      offset: 16 bytes), so it is left as is — but with attention dropout (StarCoder2's) the CPU falls back to the
      math path, which keeps the S x S probabilities and mask, while CUDA's kernels draw the mask inside from that
      seed: the CPU kernel runs without dropout (`cuda_sdpa`);
    - DeepSpeed's FusedAdam: the CPU and CUDA kernels both update in place and allocate nothing;
    - left as is: LayerNorm (GPT-2, Phi) keeps its mean and rstd in the input's dtype on the CPU, fp32 on CUDA (4
      bytes a token a norm less here), and SDPA after a partial-rotary cat (Phi) returns a head-major output on the
      CPU that the output projection copies (its rows run eager attention)."""
    original = torch.nn.functional.dropout, torch.nn.functional.scaled_dot_product_attention
    torch.nn.functional.dropout = cuda_dropout
    torch.nn.functional.scaled_dot_product_attention = cuda_sdpa
    try:
        yield
    finally:
        torch.nn.functional.dropout, torch.nn.functional.scaled_dot_product_attention = original


class Scalars(TorchDispatchMode):
    """Under fake tensors a tensor's value cannot be read; DeepSpeed reads a few to decide its step (overflow flags,
    the gradient norm). Each read of a fake tensor gets a fixed benign value: integers and flags 0 (no overflow,
    no skipped step), floats 1.0 (a finite gradient norm, so the step runs; with gradient_clipping 1.0 the clip
    coefficient 1/(1+1e-6) < 1, so clipping runs, as in a real step whose norm exceeds the clip)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten._local_scalar_dense.default and isinstance(args[0], FakeTensor):
            return 1.0 if args[0].dtype.is_floating_point else 0
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def swappable(mode: FakeTensorMode) -> Iterator[None]:
    """nn.Module.to() swaps a fake parameter for its converted copy (torch.utils.swap_tensors), which refuses a
    tensor with weak references. Two kinds are on the way: fake mode's converter memo (a cache: the Parameter
    constructor re-fakes its data) and weakref.finalize callbacks (DeepSpeed's parameter-name map,
    deepspeed.utils.debug.WeakIdNameMap). Memo entries are dropped; finalizers are detached for the swap and
    registered again on the same object after it (swap_tensors keeps each Python object, swapping contents)."""
    original = torch.utils.swap_tensors
    memo = mode.fake_tensor_converter.meta_converter.tensor_memo

    def swap(t1: torch.Tensor, t2: torch.Tensor) -> None:
        collecting = gc.isenabled()
        gc.disable()  # a collection here runs finalizers, which would change the dicts being read
        try:
            for key in [key for key, value in list(memo.items()) if value is t1 or value is t2]:
                del memo[key]
            held = [f for f, info in list(weakref.finalize._registry.items())  # type: ignore[attr-defined]
                    if info.weakref() is t1 or info.weakref() is t2]
        finally:
            if collecting:
                gc.enable()
        callbacks = [f.detach() for f in held]
        del held
        original(t1, t2)
        for detached in callbacks:
            if detached is not None:
                obj, func, args, kwargs = detached
                weakref.finalize(obj, func, *args, **kwargs)

    torch.utils.swap_tensors = swap
    try:
        yield
    finally:
        torch.utils.swap_tensors = original

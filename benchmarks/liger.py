"""Liger's kernels (training.liger) as they run on CUDA, for benchmarks/recipes.py: the Trainer's own
use_liger_kernel patches the model (liger_kernel.transformers._apply_liger_kernel_to_instance: RMSNorm, SwiGLU MLP,
RoPE and, under hf-trainer, the fused linear cross-entropy as the model's forward; SFTTrainer keeps its own fused head),
and Liger's own autograd functions run: every buffer they read or write is allocated by torch ops before a Triton
kernel fills it, and that is what the counter sees.

What differs from CUDA, set to CUDA's way:
- a Triton kernel launch (`kernel[grid](...)`, JIT and autotuned alike) compiles for a GPU: here it does nothing, as
  it allocates nothing (its outputs are the buffers passed in);
- the fused linear cross-entropy projects each chunk into a preallocated logits buffer and its gradient straight into
  the hidden states' gradient on CUDA (`_can_use_mm_out`: `torch.mm(out=...)`), where the CPU path makes a new tensor
  per chunk; and on an Ampere or newer GPU it accumulates the output head's gradient in place in the weight's dtype
  (`torch.addmm(out=grad_weight)`), where the CPU's fallback makes a weight-sized product and its fp32 copy per chunk
  (`_WeightGradInPlace`);
- left as is: RMSNorm's backward sums its weight's gradient over one row of partial sums a streaming multiprocessor
  (132 on an H100: 132 x hidden fp32, about 2 MB for a hidden size of 4096); the CPU path keeps one row.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def _launch(*args: Any, **kwargs: Any) -> None:
    return None


class _WeightGradInPlace(TorchDispatchMode):
    """Inside the fused linear cross-entropy's forward: the CPU fallback's weight-gradient product
    (`grad_weight += torch.mm(grad_logits.t(), input_chunk).float()`) as CUDA's in-place addmm, which allocates
    nothing — the product (the only mm there shaped as the weight) and its fp32 copy become one-element stand-ins
    broadcast to the weight's shape, and adding one to the gradient leaves it as it is."""

    def __init__(self, weight_shape: torch.Size) -> None:
        super().__init__()
        self.weight_shape = weight_shape
        self.stand_ins: set[int] = set()

    def _stand_in(self, like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        stand_in = like.new_empty((1, 1), dtype=dtype).expand(self.weight_shape)
        self.stand_ins.add(id(stand_in))
        return stand_in

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.ops.aten.mm.default and (args[0].shape[0], args[1].shape[1]) == tuple(self.weight_shape):
            return self._stand_in(args[0], args[0].dtype)
        if func is torch.ops.aten._to_copy.default and id(args[0]) in self.stand_ins:
            return self._stand_in(args[0], kwargs.get("dtype", args[0].dtype))
        if func is torch.ops.aten.add_.Tensor and id(args[1]) in self.stand_ins:
            return args[0]
        return func(*args, **kwargs)


class _LossLast(TorchDispatchMode):
    """The fused linear cross-entropy's backward asks whether its incoming gradient is 1.0 (`torch.equal`: the loss
    is the last op) and scales its saved gradients in place otherwise, allocating nothing either way; a fake tensor
    cannot be compared, so it reads as 1.0, as under the Trainer, whose model takes the loss's keyword arguments and
    so backpropagates the loss unscaled."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten.equal.default:
            return True
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def liger_as_on_cuda() -> Iterator[None]:
    """Liger's kernels as on CUDA (see the module's docstring), for the Trainer's steps run inside. Liger finds each
    op's backends on its first call and logs the ones that cannot be imported here (CuTe DSL, Ascend) with the
    exception, whose traceback holds the frames of the step that called it — and their tensors, for as long as a
    handler keeps the record (pytest's does): every op's backends are found first, before any step."""
    import liger_kernel.transformers  # noqa: F401 - its modules declare every op's backend locations
    from liger_kernel.backends import registry
    from liger_kernel.ops import fused_linear_cross_entropy as flce
    from triton.runtime.jit import KernelInterface

    for op in list(registry._DISCOVERY_MAP):
        registry.list_registered(op)

    saved = KernelInterface.__getitem__, flce._can_use_mm_out, flce.fused_linear_cross_entropy_forward
    forward = flce.fused_linear_cross_entropy_forward

    def mm_out_as_on_cuda(_input: torch.Tensor, weight: torch.Tensor) -> bool:
        # CUDA's answer, with the CPU's autocast standing for CUDA's: no autograd recording (the function's forward),
        # operands of one dtype, which autocast (when on) would compute in
        if torch.is_grad_enabled() or _input.dtype != weight.dtype or \
                _input.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            return False
        return _input.dtype == torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else True

    def forward_in_place(_input: torch.Tensor, weight: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        with _WeightGradInPlace(weight.shape):
            return forward(_input, weight, *args, **kwargs)

    # liger's apply functions also patch the families' modeling modules (their RMSNorm, MLP and rotary classes), which
    # outlive the run: the modules are put back as they were
    modeling = {name: dict(vars(module)) for name, module in list(sys.modules.items())
                if name.startswith("transformers.models.") and ".modeling_" in name}
    KernelInterface.__getitem__ = lambda kernel, grid: _launch
    flce._can_use_mm_out = mm_out_as_on_cuda
    flce.fused_linear_cross_entropy_forward = forward_in_place
    try:
        with _LossLast():
            yield
    finally:
        KernelInterface.__getitem__, flce._can_use_mm_out, flce.fused_linear_cross_entropy_forward = saved
        for name, attributes in modeling.items():
            vars(sys.modules[name]).update(attributes)

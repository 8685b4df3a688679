"""Resume bit for bit under DeepSpeed's CPU Adam. Its C++ optimizer (the CPU accelerator's FusedAdam, and
DeepSpeedCPUAdam for optimizer offload on any host) keeps the bias-correction factors β₁ᵗ and β₂ᵗ as running
products, multiplied once per step, and computes them in closed form (pow) only when the step jumps
(deepspeed/ops/csrc/includes/cpu_adam.h, Adam_Optimizer::IncrementStep). A resumed run is a new process whose first
step jumps to k+1: pow(β, k+1) differs from the k-fold product in the last bits, every later update differs by an
ulp, and the run drifts from the uninterrupted one (weights 1e-6 apart after 40 steps, measured). Replaying steps
1..k on a one-element scratch tensor rebuilds the same products. The CUDA FusedAdam computes them in closed form
at every step and needs nothing."""

from __future__ import annotations

from typing import Any

import torch
from deepspeed.accelerator import get_accelerator
from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam
from deepspeed.ops.adam.fused_adam import multi_tensor_applier


def _base_optimizer(engine: Any) -> Any:
    """The torch optimizer under DeepSpeed's wrappers (ZeRO, mixed precision)."""
    opt = engine.optimizer
    while opt is not None and not isinstance(opt, torch.optim.Optimizer) and hasattr(opt, "optimizer"):
        opt = opt.optimizer
    return opt


def replay_bias_corrections(engine: Any) -> int:
    """After loading a checkpoint: advance the CPU Adam's running products through the optimizer steps it records
    (its own count: a step skipped for an fp16 overflow never reached it), as the uninterrupted run did. The steps
    replayed."""
    opt = _base_optimizer(engine)
    cpu_fused = isinstance(opt, FusedAdam) and get_accelerator().device_name() == "cpu"
    if not (cpu_fused or isinstance(opt, DeepSpeedCPUAdam)):
        return 0
    steps = max((int(state.get("step", 0)) for state in opt.state.values()), default=0)
    scratch = [torch.zeros(1, dtype=torch.float32) for _ in range(4)]  # gradient, parameter, exp_avg, exp_avg_sq
    for step in range(1, steps + 1):
        # every group, in the order the optimizer steps them (each call may move the products); ZeRO-3 empties the
        # groups' parameter lists between its steps, so their being empty now says nothing
        for group in opt.param_groups:
            beta1, beta2 = group["betas"]
            if cpu_fused:
                multi_tensor_applier(opt.multi_tensor_adam, opt._dummy_overflow_buf, [[t] for t in scratch], 0.0,
                                     beta1, beta2, group["eps"], step, opt.adam_w_mode, 1, 0.0)
            else:
                grad, param, exp_avg, exp_avg_sq = scratch
                opt.ds_opt_adam.adam_update(opt.opt_id, step, 0.0, beta1, beta2, group["eps"], 0.0, True, param, grad,
                                            exp_avg, exp_avg_sq)
    return steps

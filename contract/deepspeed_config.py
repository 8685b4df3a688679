"""The DeepSpeed config a plan runs with, generated from the training spec by one pure function."""

from __future__ import annotations

from typing import Any

from contract.schema import Offload, Optimizer, Precision, TrainingSpec

# DeepSpeed communication buckets tunefleet writes into every generated config (elements).
REDUCE_BUCKET_ELEMENTS = 50_000_000
ALLGATHER_BUCKET_ELEMENTS = 50_000_000
STAGE3_PREFETCH_BUCKET_ELEMENTS = 50_000_000
STAGE3_MAX_LIVE_PARAMETERS = 1_000_000_000
STAGE3_PARAM_PERSISTENCE_THRESHOLD = 100_000

DEFAULT_LEARNING_RATE = 2e-4
DEFAULT_WEIGHT_DECAY = 0.0
DEFAULT_WARMUP_STEPS = 10
DEFAULT_GRADIENT_CLIPPING = 1.0


def deepspeed_config(t: TrainingSpec, world_size: int, *, learning_rate: float = DEFAULT_LEARNING_RATE,
                     weight_decay: float = DEFAULT_WEIGHT_DECAY, warmup_steps: int = DEFAULT_WARMUP_STEPS,
                     total_steps: int = 0, gradient_clipping: float = DEFAULT_GRADIENT_CLIPPING) -> dict[str, Any]:
    zero: dict[str, Any] = {"stage": t.zero_stage}
    if t.zero_stage in (1, 2):
        zero.update(reduce_bucket_size=REDUCE_BUCKET_ELEMENTS, allgather_bucket_size=ALLGATHER_BUCKET_ELEMENTS,
                    overlap_comm=world_size > 1, contiguous_gradients=True)
    if t.zero_stage == 3:
        zero.update(reduce_bucket_size=REDUCE_BUCKET_ELEMENTS,
                    stage3_prefetch_bucket_size=STAGE3_PREFETCH_BUCKET_ELEMENTS,
                    stage3_max_live_parameters=STAGE3_MAX_LIVE_PARAMETERS,
                    stage3_param_persistence_threshold=STAGE3_PARAM_PERSISTENCE_THRESHOLD,
                    overlap_comm=world_size > 1, contiguous_gradients=True,
                    stage3_gather_16bit_weights_on_model_save=True)
    if t.offload is not Offload.NONE:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if t.offload is Offload.ALL:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}

    optimizer: dict[str, Any]
    if t.optimizer is Optimizer.SGD:
        optimizer = {"type": "SGD", "params": {"lr": learning_rate, "momentum": 0.9, "weight_decay": weight_decay}}
    else:
        optimizer = {"type": "AdamW", "params": {"lr": learning_rate, "betas": [0.9, 0.999], "eps": 1e-8,
                                                 "weight_decay": weight_decay}}
    # Linear warmup from 0 (DeepSpeed's default "log" warmup divides by log(warmup_num_steps), so 1 step breaks it);
    # no warmup and no decay means a constant learning rate and no scheduler.
    warmup = {"warmup_min_lr": 0.0, "warmup_max_lr": learning_rate, "warmup_num_steps": max(1, warmup_steps),
              "warmup_type": "linear"}
    scheduler: dict[str, Any] | None = None
    if total_steps > warmup_steps:
        scheduler = {"type": "WarmupDecayLR", "params": {**warmup, "total_num_steps": total_steps}}
    elif warmup_steps:
        scheduler = {"type": "WarmupLR", "params": warmup}
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": t.micro_batch_size,
        "gradient_accumulation_steps": t.gradient_accumulation_steps,
        "train_batch_size": t.micro_batch_size * t.gradient_accumulation_steps * world_size,
        "gradient_clipping": gradient_clipping,
        "zero_optimization": zero,
        "optimizer": optimizer,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if scheduler is not None:
        config["scheduler"] = scheduler
    if t.precision is Precision.FP16:
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    elif t.precision in (Precision.BF16, Precision.BF16_PURE):
        config["bf16"] = {"enabled": True}
    if t.precision is Precision.BF16_PURE:
        config["data_types"] = {"grad_accum_dtype": "bf16"}
    return config

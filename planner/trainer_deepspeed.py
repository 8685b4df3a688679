"""The DeepSpeed config a Trainer recipe runs with on several GPUs, and the values its "auto" entries take. Pure.

A user of transformers' Trainer (directly, or through LLaMA-Factory, ms-swift or Axolotl) passes a DeepSpeed config
file with "auto" entries; the Trainer fills them from its own arguments and the model. The planner plans hf-trainer
under ZeRO 2 and 3 with LLaMA-Factory's configs (examples/deepspeed/ds_z2_config.json and ds_z3_config.json,
hiyouga/LLaMA-Factory at 1d6e8b2, read 2026-11-26), the ones its README points to; the simulation hands exactly
these to the Trainer (benchmarks/recipes.py), so what it measures is what the planner is held to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contract import deepspeed_config as ds
from contract.model import Architecture
from contract.schema import Recipe, TrainingSpec

# ZeRO stages a Trainer recipe is planned under with DeepSpeed (LLaMA-Factory ships no stage-1 config); ZeRO 0 is the
# Trainer without DeepSpeed, on one GPU
TRAINER_DEEPSPEED_STAGES = (2, 3)

# ds_z2_config.json's buckets (elements) and ds_z3_config.json's limits
Z2_BUCKET_ELEMENTS = 500_000_000
Z3_MAX_LIVE_PARAMETERS = 1_000_000_000
Z3_SUB_GROUP_ELEMENTS = 1_000_000_000


def trainer_deepspeed_config(stage: int) -> dict[str, Any]:
    """LLaMA-Factory's config for `stage`, "auto" entries and all, as a user hands it to TrainingArguments."""
    if stage not in TRAINER_DEEPSPEED_STAGES:
        raise ValueError(f"the Trainer's DeepSpeed configs are for ZeRO {TRAINER_DEEPSPEED_STAGES}, not {stage}")
    zero: dict[str, Any] = {"stage": stage, "overlap_comm": False, "contiguous_gradients": True}
    if stage == 2:
        zero.update(allgather_partitions=True, allgather_bucket_size=Z2_BUCKET_ELEMENTS, reduce_scatter=True,
                    reduce_bucket_size=Z2_BUCKET_ELEMENTS, round_robin_gradients=True)
    else:
        zero.update(sub_group_size=Z3_SUB_GROUP_ELEMENTS, reduce_bucket_size="auto",
                    stage3_prefetch_bucket_size="auto", stage3_param_persistence_threshold="auto",
                    stage3_max_live_parameters=Z3_MAX_LIVE_PARAMETERS, stage3_max_reuse_distance=Z3_MAX_LIVE_PARAMETERS,
                    stage3_gather_16bit_weights_on_model_save=True)
    return {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "gradient_clipping": "auto", "zero_allow_untested_optimizer": True,
            "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
                     "hysteresis": 2, "min_loss_scale": 1},
            "bf16": {"enabled": "auto"}, "zero_optimization": zero}


@dataclass(frozen=True)
class Buckets:
    """What DeepSpeed's buffers are sized by (elements): the gradient reduce bucket and ZeRO-3's live-parameter limit,
    and whether overlap_comm double-buffers the reduce."""

    reduce_elements: int
    max_live_parameters: int
    overlap_comm: bool


def buckets(a: Architecture, t: TrainingSpec, world_size: int) -> Buckets:
    """The buckets `t` runs DeepSpeed with: the executor's generated config (contract.deepspeed_config, overlap_comm
    on several ranks), or a Trainer recipe's `trainer_deepspeed_config` once transformers has filled its "auto"
    entries for `a` (integrations/deepspeed.py, trainer_config_finalize: reduce_bucket_size = hidden_size²)."""
    if t.recipe is Recipe.TUNEFLEET:
        return Buckets(reduce_elements=ds.REDUCE_BUCKET_ELEMENTS, max_live_parameters=ds.STAGE3_MAX_LIVE_PARAMETERS,
                       overlap_comm=world_size > 1)
    if t.zero_stage == 3:
        return Buckets(reduce_elements=a.hidden_size * a.hidden_size, max_live_parameters=Z3_MAX_LIVE_PARAMETERS,
                       overlap_comm=False)
    return Buckets(reduce_elements=Z2_BUCKET_ELEMENTS, max_live_parameters=Z3_MAX_LIVE_PARAMETERS, overlap_comm=False)

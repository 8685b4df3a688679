"""The DeepSpeed config keys tunefleet understands, and a check that refuses every other key by name.

DeepSpeed acts on many keys that reach outside the run (`tensorboard.output_path`, `nvme_path`, `checkpoint`,
`comms_logger`, autotuning, ...). A plan may carry only what the planner writes (planner/deepspeed_config.py)
plus the few tuning keys below, each with its type; values are type-checked and numbers must be finite.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from contract.errors import PlanError

_FIELD = "deepspeed_config_json"
_NUMBER = (int, float)
_OFFLOAD = {"device": str, "pin_memory": bool}
# key -> the type of its value, or the schema of the object it holds.
SCHEMA: Mapping[str, Any] = {
    "train_micro_batch_size_per_gpu": int, "gradient_accumulation_steps": int, "train_batch_size": int,
    "gradient_clipping": _NUMBER, "steps_per_print": int, "wall_clock_breakdown": bool, "prescale_gradients": bool,
    "zero_optimization": {
        "stage": int, "reduce_bucket_size": _NUMBER, "allgather_bucket_size": _NUMBER, "overlap_comm": bool,
        "contiguous_gradients": bool, "reduce_scatter": bool, "allgather_partitions": bool,
        "stage3_prefetch_bucket_size": _NUMBER, "stage3_max_live_parameters": _NUMBER,
        "stage3_max_reuse_distance": _NUMBER, "stage3_param_persistence_threshold": _NUMBER,
        "stage3_gather_16bit_weights_on_model_save": bool, "round_robin_gradients": bool,
        "offload_optimizer": _OFFLOAD, "offload_param": _OFFLOAD,
    },
    "optimizer": {"type": str, "params": {"lr": _NUMBER, "betas": list, "eps": _NUMBER, "weight_decay": _NUMBER,
                                          "momentum": _NUMBER, "nesterov": bool}},
    "scheduler": {"type": str, "params": {"warmup_min_lr": _NUMBER, "warmup_max_lr": _NUMBER,
                                          "warmup_num_steps": int, "warmup_type": str, "total_num_steps": int}},
    "fp16": {"enabled": bool, "loss_scale": _NUMBER, "initial_scale_power": int, "loss_scale_window": int,
             "hysteresis": int, "min_loss_scale": _NUMBER},
    "bf16": {"enabled": bool},
    "data_types": {"grad_accum_dtype": str},
}
# Keys that define the run; a config without them is not one the planner wrote.
REQUIRED = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "zero_optimization", "optimizer")
_OFFLOAD_DEVICES = ("cpu", "none")
_MAX_TEXT = 64


def check_deepspeed_config(config: Mapping[str, Any]) -> None:
    """Raise PlanError naming a required key that is missing, the first key tunefleet does not understand, or a
    value of the wrong type."""
    missing = [key for key in REQUIRED if key not in config]
    if missing:
        raise PlanError(_FIELD, f"lacks {', '.join(missing)}; use the DeepSpeed config the planner writes into the "
                                "plan")
    _check_keys(config, SCHEMA, "")


def _check_keys(config: Mapping[str, Any], schema: Mapping[str, Any], path: str) -> None:
    for key, value in config.items():
        where = f"{path}{key}"
        if key not in schema:
            known = ", ".join(sorted(schema))
            raise PlanError(_FIELD, f"key '{where[:_MAX_TEXT]}' is not one tunefleet passes to DeepSpeed; "
                                    f"remove it (understood here: {known})")
        expected = schema[key]
        if isinstance(expected, Mapping):
            if not isinstance(value, dict):
                raise PlanError(_FIELD, f"'{where}' must be a JSON object, got {type(value).__name__}")
            _check_keys(value, expected, f"{where}.")
            continue
        _check_value(where, value, expected)


_NAMES = {int: "an integer", _NUMBER: "a number", bool: "true or false", str: "a string", list: "a list"}


def _check_value(where: str, value: Any, expected: Any) -> None:
    if isinstance(value, bool) is not (expected is bool) or not isinstance(value, expected):
        raise PlanError(_FIELD, f"'{where}' must be {_NAMES[expected]}, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise PlanError(_FIELD, f"'{where}' is {value}; give a finite number")
    if isinstance(value, str) and len(value) > _MAX_TEXT:
        raise PlanError(_FIELD, f"'{where}' is {len(value)} characters; at most {_MAX_TEXT}")
    if isinstance(value, list) and (len(value) > 4 or not all(isinstance(v, _NUMBER) and not isinstance(v, bool)
                                                              and math.isfinite(v) for v in value)):
        raise PlanError(_FIELD, f"'{where}' must be a short list of finite numbers")
    if where.endswith(".device") and value not in _OFFLOAD_DEVICES:
        raise PlanError(_FIELD, f"'{where}' is {value[:_MAX_TEXT]!r}; tunefleet offloads to 'cpu' (or 'none')")

"""The FSDP config a Trainer recipe runs with when training.sharding is fsdp. Pure.

A user of transformers' Trainer shards with PyTorch's FSDP through accelerate's config. The planner plans it with
PEFT's example config (examples/sft/configs/fsdp_config.yaml, huggingface/peft, read 2026-11-27; the config behind the
Llama-2-70B LoRA and QLoRA rows of docs/source/accelerate/fsdp.md): FSDP 1, FULL_SHARD, each decoder layer its own unit
(TRANSFORMER_BASED_WRAP, and the Trainer wraps PEFT's adapters in units of their own: transformers'
update_fsdp_plugin_peft), the next unit gathered before the current one's backward (BACKWARD_PRE), use_orig_params
false, bf16 mixed precision (the gathered parameters, the gradients' reduction and the buffers in bf16), no offload.
The simulation hands exactly these to the Trainer (benchmarks/recipes.py), so what it measures is what the planner is
held to.
"""

from __future__ import annotations

from typing import Any

# the FSDP PEFT's config and the measured rows run (transformers 5 defaults to FSDP 2 and deprecates 1)
FSDP_VERSION = 1


def trainer_fsdp_config() -> dict[str, Any]:
    """PEFT's FSDP config as TrainingArguments(fsdp_config=...) takes it. TRANSFORMER_BASED_WRAP without class names
    wraps the model's _no_split_modules (its decoder layer: accelerate's FullyShardedDataParallelPlugin);
    sync_module_states and cpu_ram_efficient_loading only change how rank 0's weights reach the others before the
    first step (the simulation builds every rank's model, so it leaves them off)."""
    return {"version": FSDP_VERSION, "reshard_after_forward": "full_shard",
            "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "backward_prefetch": "BACKWARD_PRE",
            "forward_prefetch": False, "use_orig_params": False, "sync_module_states": False,
            "cpu_ram_efficient_loading": False, "state_dict_type": "SHARDED_STATE_DICT"}

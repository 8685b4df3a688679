"""PEFT LoRA configuration from the plan, with target modules checked against the real model."""

from __future__ import annotations

from typing import Any

from contract.errors import PlanError
from contract.model import PEFT_EXPERT_MAPPED_NAMES
from contract.schema import ALL_LINEAR, LoraSpec


def linear_module_names(model: Any) -> set[str]:
    """Leaf names (q_proj, down_proj, ...) of the model's linear layers, the output head excluded. A subclass of
    nn.Linear with a forward of its own is not one (Llama 4's router returns its routing scores and logits, which
    PEFT's LoRA layer cannot add to); bitsandbytes' quantised linears are."""
    import torch

    names = set()
    for full_name, module in model.named_modules():
        is_linear = type(module) is torch.nn.Linear or type(module).__name__ in ("Linear4bit", "Linear8bitLt")
        if is_linear and "lm_head" not in full_name:
            names.add(full_name.rsplit(".", 1)[-1])
    return names


def _has_experts(model: Any) -> bool:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return bool(getattr(config, "num_local_experts", 0) or getattr(config, "num_experts", 0))


# A vision-language model's vision tower and merger (Qwen2-VL, Qwen2.5-VL: model.visual; Gemma 3: its vision_tower and
# multi_modal_projector), left out of LoRA while it is frozen.
VISION_MODULES = r".*\b(visual|vision_tower|multi_modal_projector)\..*"


def lora_targets(spec: LoraSpec, model: Any) -> str | list[str]:
    """The plan's target modules as PEFT takes them; a target module the model lacks is a PlanError naming the
    ones it has. Needs no PEFT import (the launcher checks plans with it)."""
    available = linear_module_names(model)
    # names PEFT would map onto the fused expert tensors (DeepSeek-V3's MLP linears): not adaptable by name
    mapped = set(PEFT_EXPERT_MAPPED_NAMES.get(getattr(model.config, "model_type", ""), ())) & available
    if spec.target_modules == (ALL_LINEAR,) and _has_experts(model):
        # PEFT reads all-linear on a mixture of experts as its attention linears and its 3-D expert tensors too
        # (utils/transformers_weight_conversion.py), whose ParamWrapper refuses dropout; the planner adapts the
        # linear modules (planner.architecture: lora_targets), and so does this
        targets: str | list[str] = sorted(available - mapped)
    elif mapped & set(spec.target_modules):
        named = ", ".join(sorted(mapped & set(spec.target_modules)))
        raise PlanError("training.lora.target_modules",
                        f"PEFT maps {named} of this model onto its routed experts' fused tensors; adapt "
                        f"{', '.join(sorted(available - mapped))} (or use '{ALL_LINEAR}')")
    elif spec.target_modules == (ALL_LINEAR,):
        targets = ALL_LINEAR
    else:
        missing = sorted(set(spec.target_modules) - available)
        if missing:
            raise PlanError("training.lora.target_modules",
                            f"{', '.join(missing)} not in this model; its linear layers are "
                            f"{', '.join(sorted(available))} (or use '{ALL_LINEAR}')")
        targets = list(spec.target_modules)
    return targets


def lora_config(spec: LoraSpec, model: Any, frozen_vision: bool = False) -> Any:
    """peft.LoraConfig for the plan (lora_targets' checks first). A frozen vision tower gets no adapters, as the
    planner counts it (planner.parameters.parameter_split)."""
    from peft import LoraConfig, TaskType  # the ranks' import, not the launcher's (seconds of start-up)

    targets = lora_targets(spec, model)
    # exclude_modules only where there are modules to exclude: PEFT before 0.14 (benchmarks/legacy_trainer.py) lacks it
    excluded: dict[str, Any] = {"exclude_modules": VISION_MODULES} if frozen_vision else {}
    return LoraConfig(r=spec.rank, lora_alpha=spec.alpha,  # type: ignore[arg-type]  # PEFT annotates int, scales by any number
                      lora_dropout=spec.dropout, target_modules=targets,
                      **excluded,
                      bias="none", task_type=TaskType.CAUSAL_LM)

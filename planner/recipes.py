"""What another trainer's step allocates where it differs from the executor's (training.recipe), from the
simulation of that library's own step (benchmarks/recipes.py, make bench-simulate). Pure functions.

hf-trainer (transformers' Trainer + PEFT, no DeepSpeed, one GPU, bf16 autocast, torch AdamW):
- LoRA: the same peak as the executor's; only the split differs — PEFT keeps the adapters in fp32, so adapters
  and their gradients take 4 bytes a parameter and AdamW's two fp32 states 8 (no master copy): 16 bytes, as the
  executor's 2 + 2 + 12;
- QLoRA: PEFT's prepare_model_for_kbit_training casts every parameter that is not 4-bit to fp32 (embeddings,
  output head, norms), so the residual stream is fp32 from the embedding on, and every bitsandbytes layer returns
  its output in its input's dtype (fp32): a checkpointed layer's input and everything the recomputed layer saves
  take 4 bytes an element; autocast casts the fp32 output head to bf16 for its matmul and keeps that copy for
  backward (a frozen weight: autocast caches only weights that train); the recomputed layer's backward peaks in its
  MLP, where the two fp32 gradients of the gate-up product join what the layer saved, when that exceeds the loss.
"""

from __future__ import annotations

from dataclasses import replace

from contract.model import Architecture, Family
from contract.schema import Method, Objective, Offload, Precision, Recipe, TrainingSpec
from planner.architecture import LAYER_NORM_FAMILIES
from planner.errors import UnsupportedError

# torch AdamW keeps two fp32 states per trainable parameter and, stepping with its foreach implementation (CUDA's
# default), one fp32 temporary per parameter at a time (torch/optim/adamw.py: _multi_tensor_adamw, the square root
# of exp_avg_sq); PEFT's adapters and their gradients are fp32 (LoraModel: autocast_adapter_dtype)
HF_ADAPTER_BYTES = 4
HF_ADAMW_STATE_BYTES = 8
HF_ADAMW_STEP_BYTES = 4


def trainer_state_bytes(adapter_params: int, trainable_params: int) -> tuple[int, int, int, int]:
    """(adapters, their gradients, AdamW's states, its step's temporary) under transformers' Trainer: fp32 adapters
    and gradients, two fp32 states and no master copy."""
    return (adapter_params * HF_ADAPTER_BYTES, trainable_params * HF_ADAPTER_BYTES,
            trainable_params * HF_ADAMW_STATE_BYTES, trainable_params * HF_ADAMW_STEP_BYTES)

_FIELD = "training.recipe"


def check(a: Architecture, t: TrainingSpec, world_size: int) -> None:
    """Refuse what a recipe's model does not cover (simulated so far), naming what to change."""
    if t.recipe is Recipe.TUNEFLEET:
        return
    if t.method not in (Method.LORA, Method.QLORA):
        raise UnsupportedError(_FIELD, f"hf-trainer is modelled for lora and qlora so far, not {t.method.value}; "
                                       "plan it with recipe tunefleet")
    if world_size > 1 or t.zero_stage or t.offload is not Offload.NONE:
        raise UnsupportedError(_FIELD, "hf-trainer is modelled on one GPU without DeepSpeed (ZeRO 0, no offload); "
                                       "plan several GPUs with recipe tunefleet")
    if t.objective is not Objective.SFT or a.vision is not None:
        raise UnsupportedError(_FIELD, "hf-trainer is modelled for supervised fine-tuning of language models; plan "
                                       "DPO and vision-language jobs with recipe tunefleet")
    if t.method is Method.QLORA and not t.gradient_checkpointing:
        raise UnsupportedError(_FIELD, "hf-trainer QLoRA is modelled with gradient checkpointing on (its default "
                                       "in prepare_model_for_kbit_training); plan it with --grad-ckpt")
    if a.family in LAYER_NORM_FAMILIES or a.family is Family.GEMMA2 or a.num_experts:
        raise UnsupportedError(_FIELD, f"hf-trainer is modelled for dense RMSNorm decoders so far, not "
                                       f"{a.family.value}; plan it with recipe tunefleet")


def covers(a: Architecture, t: TrainingSpec, world_size: int) -> bool:
    """Whether `check` passes: the layouts a search may try for the recipe."""
    try:
        check(a, t, world_size)
    except UnsupportedError:
        return False
    return True


def fp32_stream(t: TrainingSpec) -> bool:
    """Whether the step's activations are fp32 (hf-trainer QLoRA: prepare_model_for_kbit_training)."""
    return t.recipe is Recipe.HF_TRAINER and t.method is Method.QLORA


def activation_spec(t: TrainingSpec) -> TrainingSpec:
    """`t` with the precision its activations take: fp32 where the recipe's stream is (`fp32_stream`)."""
    return replace(t, precision=Precision.FP32) if fp32_stream(t) else t


def upcast_weight_bytes(total: int, quantised: int, t: TrainingSpec) -> int:
    """The fp32 upcast of every parameter that is not 4-bit, beyond its bf16 bytes."""
    return 2 * (total - quantised) if fp32_stream(t) else 0


def head_copy_bytes(a: Architecture, t: TrainingSpec) -> int:
    """Autocast's bf16 copy of the fp32 output head, saved for backward."""
    return 2 * a.vocab_size * a.hidden_size if fp32_stream(t) else 0


def mlp_backward_bytes(a: Architecture, t: TrainingSpec, tokens: int) -> int:
    """The fp32 gradients of the activated gate times up product (one per factor), alive with the recomputed
    layer's saved tensors in its backward (simulated: the peak of hf-trainer QLoRA at 16k tokens a micro-batch)."""
    return 2 * a.intermediate_size * tokens * 4 if fp32_stream(t) else 0

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

trl-sft (TRL's SFTTrainer + PEFT with SFTConfig's defaults, no DeepSpeed, one GPU): the same Trainer, with
- TRL's fused LM head (trl/trainer/utils.py add_fused_lm_head, trl/kernels/chunked_logprob.py): the labelled
  positions' hidden states are gathered and projected through the head one tile of TOKEN_TILE tokens by VOCAB_TILE
  columns at a time into per-token log-probabilities and entropies; no logits tensor exists. It saves the gathered
  hidden states, their labels and two fp32 statistics a token; its backward accumulates the hidden states' gradient
  in fp32 and casts it back as it ends;
- transformers' default optimizer, adamw_torch_fused: the fused step allocates nothing;
- QLoRA without prepare_model_for_kbit_training: the rest of the model stays bf16, and SFTTrainer casts the
  adapters to bf16 (so their gradients and AdamW's states are bf16 too).

Either under DeepSpeed ZeRO 2-3 (planner.trainer_deepspeed: LLaMA-Factory's configs, on any number of GPUs): the
engine's state as the executor's (bf16 module, fp32 master and AdamW states, partitioned), no autocast, and the
Trainer's optimizer stepped over the fp32 partition (`zero_step_bytes_per_element`); what memory.py reads through
`runs_deepspeed`.
"""

from __future__ import annotations

from dataclasses import replace

from contract.model import Architecture, Family
from contract.schema import Attention, LoadDtype, Method, Objective, Offload, Precision, Recipe, Sharding, TrainingSpec
from planner import constants as k
from planner import liger, torchtune
from planner.architecture import LAYER_NORM_FAMILIES
from planner.errors import UnsupportedError
from planner.parameters import ParameterSplit
from planner.trainer_deepspeed import TRAINER_DEEPSPEED_STAGES

# torch AdamW keeps two states per trainable parameter in its dtype and, stepping with its foreach implementation
# (CUDA's default), one temporary per parameter (torch/optim/adamw.py: _multi_tensor_adamw, the square root of
# exp_avg_sq); PEFT's adapters and their gradients are fp32 (LoraModel: autocast_adapter_dtype)
HF_ADAPTER_BYTES = 4
# SFTTrainer casts a quantised model's adapters to bf16 (trl/trainer/sft_trainer.py, "When using QLoRA, the PEFT
# adapter weights are converted to bf16")
TRL_QLORA_ADAPTER_BYTES = 2
# torch AdamW's two states take their parameter's dtype (torch/optim/adamw.py: zeros_like(param)), and its foreach step
# one temporary (torch/optim/adam.py: _multi_tensor_adam, exp_avg_sq_sqrt)
ADAMW_STATES = 2
ADAMW_STEP_TEMPORARIES = 1
FP32_BYTES = 4

# TRL's trainers: SFTTrainer and DPOTrainer prepare PEFT models and score tokens alike
TRL_RECIPES = (Recipe.TRL_SFT, Recipe.TRL_DPO)
# TRL 1.16's fused LM head: tokens per projection tile (chunked_logprob.TOKEN_CHUNK_SIZE) and vocabulary columns per
# tile (utils._CHUNKED_LOGPROB_CHUNK_SIZE)
TRL_TOKEN_TILE = 4096
TRL_VOCAB_TILE = 32768
# what it saves a labelled token besides its hidden state: the label (int64), log Z and the entropy (fp32 each)
TRL_SAVED_BYTES_PER_TOKEN = 8 + 4 + 4


def trainer_state_bytes(adapter_params: int, trainable_params: int, t: TrainingSpec) -> tuple[int, int, int, int]:
    """(adapters, their gradients, AdamW's states, its step's temporary) under transformers' Trainer: the trained
    parameters and their gradients in their dtype (`trained_param_bytes`), two AdamW states of that dtype and no
    master copy; the foreach step's temporary, one per parameter in its dtype, under hf-trainer (adamw_torch), none
    under trl-sft (adamw_torch_fused)."""
    b = trained_param_bytes(t)
    step = trainable_params * b * ADAMW_STEP_TEMPORARIES if t.recipe is Recipe.HF_TRAINER else 0
    return adapter_params * b, trainable_params * b, trainable_params * ADAMW_STATES * b, step


def trained_param_bytes(t: TrainingSpec) -> int:
    """Bytes a trained parameter takes under a Trainer recipe: a full fine-tune trains the model's own bf16 weights,
    which accelerate upcasts to fp32 under FSDP (`fsdp`); adapters are PEFT's fp32, or bf16 where SFTTrainer casts them
    (QLoRA)."""
    if t.method is Method.FULL and fsdp(t):
        return FP32_BYTES
    if t.method is Method.FULL or t.recipe is Recipe.TORCHTUNE:  # torchtune's adapters are the model's dtype
        return t.precision.element_bytes
    return adapter_bytes(t)


def adapter_bytes(t: TrainingSpec) -> int:
    """Bytes an adapter parameter takes under a Trainer recipe: PEFT's fp32, or bf16 where SFTTrainer casts them;
    torchtune's are the model's dtype."""
    if t.recipe is Recipe.TORCHTUNE:
        return t.precision.element_bytes
    return TRL_QLORA_ADAPTER_BYTES if t.recipe in TRL_RECIPES and t.method is Method.QLORA else HF_ADAPTER_BYTES


def adapter_cast_bytes(t: TrainingSpec, split: ParameterSplit, tokens: int) -> int:
    """fp32 adapters on a bf16 stream (hf-trainer and trl-sft LoRA): PEFT casts each adapted linear's input to the
    adapters' dtype (peft.tuners.lora.Linear.forward: _cast_input_dtype), its dropout draws an fp32 output, and
    autocast casts that back to bf16 for lora_A, which is what the layer saves for it. In the recomputed layer the
    widest adapted input's fp32 copy and fp32 dropout output (without dropout: its bf16 cast, saved beside the
    input) are alive together with what the layer saved before it (simulated: trl-sft Llama-3.1-8B, the peak at
    down_proj's lora_A)."""
    if runs_deepspeed(t) or fsdp(t) or fp32_stream(t) or adapter_bytes(t) == t.precision.element_bytes:
        return 0
    widths = [layer.in_features for layer in split.decoder_lora_layers]
    return max(widths, default=0) * tokens * (4 + (4 if t.applies_lora_dropout else t.precision.element_bytes))


def autocast_cache_bytes(split: ParameterSplit, t: TrainingSpec) -> int:
    """Autocast's bf16 copies of the fp32 adapters, held from their first use to the end of the forward (autocast
    caches the casts of leaf tensors that require grad): what a Trainer's forward holds beside its own peak (simulated:
    Liger's fused loss under hf-trainer QLoRA, Llama-3.2-1B, 22.6 MB for its 11.3 M adapter parameters)."""
    if runs_deepspeed(t) or fsdp(t) or adapter_bytes(t) == k.AUTOCAST_BYTES or \
            not t.method.uses_adapters:
        return 0
    return split.adapter * k.AUTOCAST_BYTES


def zero3_fp32_adapters(t: TrainingSpec) -> bool:
    """The executor's LoRA under ZeRO-3 keeps PEFT's fp32 adapters (get_peft_model: autocast_adapter_dtype), which
    ZeRO-3 partitions as they are, where ZeRO 0-2 cast the whole module to bf16 (simulated: Llama-4-Scout LoRA
    without checkpointing on 8 ranks, every adapter's dropout output fp32); so does hf-trainer's. TRL works around
    the mix for ZeRO-3 (sft_trainer.py: autocast_adapter_dtype=False), so trl-sft's adapters are bf16."""
    return runs_deepspeed(t) and t.recipe not in TRL_RECIPES and t.zero_stage == 3 and t.method is Method.LORA \
        and t.precision.element_bytes != 4


def runs_deepspeed(t: TrainingSpec) -> bool:
    """Whether DeepSpeed's engine runs the step — the executor's always, a Trainer recipe's under ZeRO 2-3 unless FSDP
    shards it — which casts the module to bf16 (ZeRO 0-2) instead of autocasting, and keeps the optimizer's fp32 master
    and states."""
    return t.recipe is Recipe.TUNEFLEET or (t.zero_stage > 0 and not fsdp(t))


def fsdp(t: TrainingSpec) -> bool:
    """Whether PyTorch's FSDP shards the step (planner.trainer_fsdp): a Trainer's autocast step whose parameters,
    gradients and AdamW states are sharded over the ranks, and each unit gathered in bf16 as it runs. What it
    allocates, simulated (benchmarks/recipes.py: accelerate's own FSDP preparation under the Trainer):
    - every parameter sharded in the dtype it was loaded in (bf16), the trained ones upcast to fp32 by accelerate
      (Accelerator.prepare_model: "Upcasted low precision parameters ... because mixed precision turned on in FSDP"):
      PEFT's adapters stay fp32, a full fine-tune's weights become fp32; their gradients fp32 and AdamW's two states
      fp32, all sharded, and AdamW's foreach temporary beside them in the step;
    - the root unit (what no decoder layer holds: the embedding, the output head, the final norm) gathered from the
      first forward on: FSDP 1 does not free the root's parameters after forward, and with frozen parameters (LoRA)
      no backward hook frees them either (simulated: the root's flat parameter whole at every step's start);
    - one decoder layer's unit gathered beside the loss's backward (BACKWARD_PRE gathers the last layer before the
      head's backward ends), two beside a layer's backward (the layer's own and the next one prefetched);
    - the activations of the Trainer's autocast step (as without DeepSpeed), the adapters gathered in bf16 (no fp32
      casts of their inputs); gradients built in backward and set to None after the step;
    - QLoRA's 4-bit weights, packed and stored as bf16, flattened and sharded with the rest of their layer (a layer's
      unit gathers them packed), the quantisation constants whole on every rank (module attributes FSDP does not
      manage), and no k-bit preparation (`fp32_stream`): the stream stays bf16."""
    return t.sharding is Sharding.FSDP


def checkpoints_outside_fsdp_units(t: TrainingSpec) -> bool:
    """Whether a checkpointed FSDP step recomputes each frozen unit from outside it (k.TRANSFORMERS_CHECKPOINTS_INSIDE_
    FSDP: a Trainer's script on transformers before 4.52, reentrant by default; the decoder layers' units frozen, the
    adapters wrapped in units of their own — a full fine-tune's units train and are resharded by their gradients'
    hooks instead). Simulated (benchmarks/legacy_trainer.py): backward keeps every recomputed layer's input and its
    gradient to the end, and a layer's backward runs beside its own unit only (the next one is gathered by its own
    recompute, not prefetched)."""
    release = t.transformers_release
    return fsdp(t) and t.gradient_checkpointing and t.method.uses_adapters and release is not None \
        and release < k.TRANSFORMERS_CHECKPOINTS_INSIDE_FSDP


def repeats_kv(t: TrainingSpec) -> bool:
    """Whether SDPA attention gets k and v copied to every query head (k.TRANSFORMERS_SDPA_UNREPEATED_KV): a Trainer's
    script on transformers before 4.54 (flash attention takes grouped heads as they are)."""
    release = t.transformers_release
    return t.attention is Attention.SDPA and release is not None and release < k.TRANSFORMERS_SDPA_UNREPEATED_KV


def adapter_compute_bytes(t: TrainingSpec) -> int:
    """Bytes an element of an adapter's input and output takes: fp32 where the executor's ZeRO-3 keeps fp32 adapters
    and nothing casts for them (`zero3_fp32_adapters`); else the stream's (the Trainer recipes' autocast casts the
    fp32 adapters' input back to bf16 for lora_A)."""
    return 4 if zero3_fp32_adapters(t) else t.precision.element_bytes


def fused_head(t: TrainingSpec) -> bool:
    """Whether the recipe's loss is TRL's fused LM head (no logits)."""
    return t.recipe in TRL_RECIPES


def _labelled(t: TrainingSpec) -> int:
    """Tokens with a next-token label: every sequence's last position has none."""
    return t.sequences_per_micro_batch * (t.sequence_length - 1)


def fused_head_saved_bytes(a: Architecture, t: TrainingSpec) -> int:
    """What the fused head saves for backward: the gathered hidden states and TRL_SAVED_BYTES_PER_TOKEN a token."""
    return _labelled(t) * (a.hidden_size * t.precision.element_bytes + TRL_SAVED_BYTES_PER_TOKEN)


def fused_head_tile_bytes(t: TrainingSpec) -> int:
    """The head's one logits tile buffer, in the compute dtype: TRL_VOCAB_TILE columns wide whatever the vocabulary
    (chunked_logprob: `mm_buf`)."""
    return min(_labelled(t), TRL_TOKEN_TILE) * TRL_VOCAB_TILE * t.precision.element_bytes


def fused_head_backward_bytes(a: Architecture, t: TrainingSpec) -> int:
    """The fused head's backward beyond what it saved: the fp32 gradient of the hidden states, the tile, and the
    gradient cast back to the activations' dtype as it returns."""
    n, h = _labelled(t), a.hidden_size
    return n * h * 4 + fused_head_tile_bytes(t) + n * h * t.precision.element_bytes


_FIELD = "training.recipe"


def check(a: Architecture, t: TrainingSpec, world_size: int) -> None:
    """Refuse what a recipe's model does not cover (simulated so far), naming what to change."""
    liger.check(a, t)
    if t.method is Method.LORA_8BIT and t.zero_stage == 3 and not fsdp(t):
        raise UnsupportedError("training.zero_stage", "8-bit LoRA under ZeRO-3 is not modelled: bitsandbytes keeps "
                                                      "each weight's int8 rows (Int8Params.CB) beside the partition "
                                                      "DeepSpeed makes of it, so ZeRO-3 shards none of the base "
                                                      "(simulated: Llama-3.1-8B on 4 ranks, 18 % above a sharded "
                                                      "plan); plan it with --zero 2, or QLoRA under ZeRO-3")
    if t.recipe is Recipe.TORCHTUNE:
        torchtune.check(a, t, world_size)
        return
    if fsdp(t):
        _check_fsdp(t, world_size)
    elif t.load_dtype is LoadDtype.FP32:
        raise UnsupportedError("training.load_dtype", "a model loaded in fp32 is modelled under FSDP so far (not "
                                                      "simulated without it: autocast's bf16 copies of fp32 weights); "
                                                      "plan it with --sharding fsdp, or --load-dtype bf16")
    if t.recipe is Recipe.TUNEFLEET:
        return
    name = t.recipe.value
    if t.method not in (Method.LORA, Method.QLORA, Method.FULL):
        raise UnsupportedError(_FIELD, f"{name} is modelled for lora, qlora and full so far, not {t.method.value}; "
                                       "plan it with recipe tunefleet")
    if t.method is Method.FULL and t.precision is not Precision.BF16:
        raise UnsupportedError(_FIELD, f"{name} full fine-tuning is modelled with the model loaded in bf16 (without "
                                       "DeepSpeed its weights, gradients and AdamW states bf16, no fp32 master copy; "
                                       "under DeepSpeed, its bf16 mixed precision); plan it with --precision bf16")
    if t.offload is not Offload.NONE:
        raise UnsupportedError(_FIELD, f"{name} is modelled without offload; plan offload with recipe tunefleet")
    if t.recipe is Recipe.TRL_DPO:
        _check_trl_dpo(t)
    elif t.objective is not Objective.SFT:
        raise UnsupportedError(_FIELD, f"{name} is modelled for supervised fine-tuning; plan DPO with recipe trl-dpo "
                                       "or tunefleet")
    if t.zero_stage and not fsdp(t):
        if t.zero_stage not in TRAINER_DEEPSPEED_STAGES:
            raise UnsupportedError("training.zero_stage", f"{name} is modelled under DeepSpeed ZeRO "
                                                          f"{' or '.join(map(str, TRAINER_DEEPSPEED_STAGES))} "
                                                          "(LLaMA-Factory's configs) or without DeepSpeed (ZeRO 0, "
                                                          "one GPU); choose one of those")
        if t.method is Method.QLORA and t.zero_stage == 3:
            raise UnsupportedError("training.zero_stage", f"{name} QLoRA under ZeRO-3 is not modelled: with "
                                                          "transformers' non-reentrant checkpointing bitsandbytes "
                                                          "keeps every layer's gathered 4-bit weights from forward to "
                                                          "backward (simulated: Llama-3.1-8B on 4 ranks, 9.4 GiB where "
                                                          "a reentrant step peaks at 7.1); plan it with --zero 2, or "
                                                          "with recipe tunefleet, which checkpoints reentrantly")
    elif not t.zero_stage and world_size > 1:
        raise UnsupportedError(_FIELD, f"{name} without DeepSpeed (ZeRO 0) is modelled on one GPU; plan several "
                                       "GPUs with --zero 2 or 3 (DeepSpeed), or with recipe tunefleet")
    if a.vision is not None:
        raise UnsupportedError(_FIELD, f"{name} is modelled for language models; plan vision-language jobs with "
                                       "recipe tunefleet")
    if uncounted_adapter_casts(t):
        raise UnsupportedError("training.gradient_checkpointing",
                               f"{name} LoRA without checkpointing and without LoRA dropout is not modelled yet: every "
                               "layer keeps the copies of its inputs that PEFT's fp32 adapters take under autocast "
                               "(simulated: Llama-3.1-8B at 4 x 512 tokens, 6.6-7.4 % above the plan); plan it with "
                               + ("--grad-ckpt" if t.recipe is Recipe.TRL_DPO else
                                  "--grad-ckpt, a LoRA dropout above 0, or --zero 2 (DeepSpeed casts the adapters)"))
    if fp32_stream(t) and not t.gradient_checkpointing:
        raise UnsupportedError(_FIELD, "hf-trainer QLoRA is modelled with gradient checkpointing on (its default "
                                       "in prepare_model_for_kbit_training); plan it with --grad-ckpt")
    if a.family in LAYER_NORM_FAMILIES or a.family is Family.GEMMA2 or a.num_experts:
        raise UnsupportedError(_FIELD, f"{name} is modelled for dense RMSNorm decoders so far, not "
                                       f"{a.family.value}; plan it with recipe tunefleet")


def _check_fsdp(t: TrainingSpec, world_size: int) -> None:
    """FSDP as simulated: hf-trainer LoRA, QLoRA or bf16 full fine-tuning on several ranks."""
    if t.recipe is not Recipe.HF_TRAINER:
        raise UnsupportedError("training.sharding", f"FSDP is modelled under recipe hf-trainer so far, not "
                                                    f"{t.recipe.value}; plan it with --recipe hf-trainer, or shard "
                                                    "with DeepSpeed (--sharding deepspeed)")
    if t.method not in (Method.LORA, Method.QLORA, Method.FULL):
        raise UnsupportedError("training.sharding", f"FSDP is modelled for lora, qlora and full fine-tuning, not "
                                                    f"{t.method.value} (not simulated); shard it with DeepSpeed "
                                                    "(--sharding deepspeed)")
    if world_size < 2:
        raise UnsupportedError("training.sharding", "FSDP shards over several GPUs; on one GPU plan hf-trainer "
                                                    "without sharding (--zero 0)")


def frozen_weight_bytes(t: TrainingSpec) -> int:
    """Bytes a frozen weight takes as FSDP shards it: the dtype the script loaded it in (the units are gathered in
    bf16 whatever it is)."""
    return FP32_BYTES if t.load_dtype is LoadDtype.FP32 else t.precision.element_bytes


def _check_trl_dpo(t: TrainingSpec) -> None:
    """TRL's DPOTrainer as simulated: DPO on one GPU without DeepSpeed or under the Trainer's ZeRO-2 (a full
    fine-tune's frozen copy held whole by TRL's prepare_deepspeed), the reference the base with the adapter off
    (adapters), that frozen copy (full), or precomputed."""
    if t.objective is not Objective.DPO:
        raise UnsupportedError("training.objective", "trl-dpo is TRL's DPO trainer; plan it with --dpo")
    if t.zero_stage == 3:
        raise UnsupportedError("training.zero_stage", "trl-dpo is modelled without DeepSpeed or under ZeRO-2: under "
                                                      "ZeRO-3 its step was simulated far above the plan (Qwen2.5-7B "
                                                      "LoRA on 4 ranks, 19.2 GiB a rank against 9.4), which the "
                                                      "planner does not model yet; plan it with --zero 2 or with "
                                                      "recipe tunefleet")
    if t.dpo_reference_model and t.method.uses_adapters:
        raise UnsupportedError("training.dpo_reference_model", "trl-dpo's reference for an adapter is the base with "
                                                               "the adapter off (DPOTrainer without ref_model); "
                                                               "drop --dpo-ref-model")


def uncounted_adapter_casts(t: TrainingSpec) -> bool:
    """A Trainer's LoRA under autocast (no DeepSpeed) with PEFT's fp32 adapters, without checkpointing and without
    dropout (DPO turns it off): what each layer saves for its adapters' casts is not modelled yet."""
    return (t.recipe is not Recipe.TUNEFLEET and not runs_deepspeed(t) and not fsdp(t) and t.method is Method.LORA
            and not t.gradient_checkpointing and not t.applies_lora_dropout)


def covers(a: Architecture, t: TrainingSpec, world_size: int) -> bool:
    """Whether `check` passes: the layouts a search may try for the recipe."""
    try:
        check(a, t, world_size)
    except UnsupportedError:
        return False
    return True


def fp32_stream(t: TrainingSpec) -> bool:
    """Whether the step's activations are fp32: hf-trainer QLoRA without DeepSpeed (prepare_model_for_kbit_training's
    fp32 casts; DeepSpeed's bf16 engine casts the module back to bf16; a model FSDP shards is not k-bit prepared)."""
    return t.recipe is Recipe.HF_TRAINER and t.method is Method.QLORA and not runs_deepspeed(t) and not fsdp(t)


def zero_step_bytes_per_element(t: TrainingSpec) -> int:
    """What DeepSpeed's ZeRO 1-3 step allocates per element of the rank's gradient partition (or ZeRO-3 sub-group):
    the flattened bf16 gradients and their fp32 copy (planner.constants.ZERO_STEP_GRAD_BYTES), and under a Trainer
    recipe whose torch AdamW DeepSpeed steps with foreach (hf-trainer's adamw_torch), then the fp32 copy beside the
    step's temporary once the bf16 flat is freed (simulated: Llama-3.1-8B full under ZeRO 2 and 3, the peak at
    `_foreach_sqrt`); trl-sft's fused AdamW keeps none."""
    if t.recipe is not Recipe.HF_TRAINER:  # DeepSpeed's fused Adam, or trl-sft's adamw_torch_fused: no temporary
        return k.ZERO_STEP_GRAD_BYTES
    return max(k.ZERO_STEP_GRAD_BYTES, FP32_BYTES + FP32_BYTES * ADAMW_STEP_TEMPORARIES)


def activation_spec(t: TrainingSpec) -> TrainingSpec:
    """`t` with the precision its activations take: fp32 where the recipe's stream is (`fp32_stream`)."""
    return replace(t, precision=Precision.FP32) if fp32_stream(t) else t


def upcast_weight_bytes(total: int, quantised: int, t: TrainingSpec) -> int:
    """The fp32 upcast of every parameter that is not 4-bit, beyond its bf16 bytes."""
    return 2 * (total - quantised) if fp32_stream(t) else 0


def head_copy_bytes(a: Architecture, t: TrainingSpec) -> int:
    """Autocast's bf16 copy of the fp32 output head, saved for backward (by the head's matmul: Liger's fused loss
    saves none)."""
    return 2 * a.vocab_size * a.hidden_size if fp32_stream(t) and not liger.fused_loss(t) else 0

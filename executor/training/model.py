"""Model and tokenizer for a run: load, quantise (QLoRA / 8-bit), attach adapters, freeze, checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import transformers

from contract.errors import HostError, PlanError
from contract.run_config import RunConfig
from contract.schema import Attention, LoadDtype, Method, Objective, Precision, TrainingSpec
from executor.training.peft_config import lora_config, lora_targets

_ATTENTION = {Attention.EAGER: "eager", Attention.SDPA: "sdpa", Attention.FLASH: "flash_attention_2"}
_DTYPE = {Precision.FP32: torch.float32, Precision.FP16: torch.float16, Precision.BF16: torch.bfloat16}


@dataclass(frozen=True)
class Host:
    """What this machine offers a run."""

    gpu_count: int

    @property
    def has_gpu(self) -> bool:
        return self.gpu_count > 0


def detect_host() -> Host:
    return Host(gpu_count=torch.cuda.device_count())


def check_host(cfg: RunConfig, host: Host) -> None:
    """Refuse what this host cannot run before anything is loaded; HostError says what to change."""
    t = cfg.training
    if not host.has_gpu:
        if t.method.quantises and t.zero_stage == 3:
            # bitsandbytes' CPU 4-bit layers repack their weights for CPU inference and fail to save them under
            # ZeRO-3 (bitsandbytes 0.50: Linear4bit._save_to_state_dict); ZeRO 0-2 train and checkpoint
            raise HostError(f"training.zero_stage: {t.method.value} under ZeRO-3 needs a CUDA GPU (bitsandbytes' "
                            "CPU kernels cannot checkpoint it); use ZeRO 0-2 on a CPU host")
        if t.precision is Precision.FP16:
            raise HostError("training.precision: fp16 mixed precision needs a CUDA GPU; use bf16 or fp32 on a CPU host")
        if t.attention is Attention.FLASH:
            raise HostError("training.attention: flash attention needs a CUDA GPU; use sdpa on a CPU host")
    elif host.gpu_count < cfg.ranks_per_node:
        raise HostError(f"hardware.gpus_per_node: the plan needs {cfg.ranks_per_node} GPUs and this host has "
                        f"{host.gpu_count}; run it on a bigger host or re-plan for {host.gpu_count}")


def load_tokenizer(cfg: RunConfig) -> Any:
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(cfg.model_path)
    except (OSError, ValueError) as e:
        raise PlanError("model.weights", f"cannot load a tokenizer from {cfg.model_path!r}: {e}") from e
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_config(cfg: RunConfig) -> Any:
    try:
        return transformers.AutoConfig.from_pretrained(cfg.model_path)
    except (OSError, ValueError) as e:
        raise PlanError("model.weights", f"cannot load a model config from {cfg.model_path!r}: {e}") from e


def quantization(t: TrainingSpec) -> Any:
    """The bitsandbytes quantisation a plan loads its base weights with (None: dense); benchmarks/simulate.py
    quantises its fake model with the same config."""
    if t.method is Method.QLORA:
        return transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=t.double_quant,
            bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_quant_storage=torch.bfloat16)
    if t.method is Method.LORA_8BIT:
        return transformers.BitsAndBytesConfig(load_in_8bit=True)
    return None


def is_vision(config: Any) -> bool:
    """A vision-language model (Qwen2-VL layout): a vision tower in front of the decoder."""
    return getattr(config, "vision_config", None) is not None


def _auto_class(config: Any) -> Any:
    return transformers.AutoModelForImageTextToText if is_vision(config) else transformers.AutoModelForCausalLM


def check_model(cfg: RunConfig) -> None:
    """Build the model on the meta device (no weights read) and check the plan's modules exist in it."""
    config = load_config(cfg)
    t = cfg.training
    if (t.image_tokens or t.train_vision_tower) and not is_vision(config):
        raise PlanError("training.image_tokens", f"{cfg.model_path} has no vision tower; plan it without image "
                                                 "tokens")
    with torch.device("meta"):
        model = _auto_class(config).from_config(config)
    check_attention(model, t)
    if cfg.training.method.uses_adapters:
        lora_targets(cfg.training.lora, model)
    elif cfg.training.method is Method.FREEZE:
        _decoder_layers(model, cfg.training.freeze_trainable_layers)


def check_attention(model: Any, t: TrainingSpec) -> None:
    """Refuse an attention implementation the model's family lacks, as transformers would at load (gpt-oss: no SDPA
    for its attention sinks). Flash attention is the host's and its package's to check, at load."""
    if t.attention is Attention.FLASH:
        return
    try:
        model.set_attn_implementation(_ATTENTION[t.attention])
    except ValueError as e:
        raise PlanError("training.attention", f"{e} Plan it with eager attention.") from e


def _decoder_layers(model: Any, trainable: int) -> Any:
    layers = model.get_decoder().layers
    if trainable > len(layers):
        raise PlanError("training.freeze_trainable_layers", f"the model has {len(layers)} decoder layers, "
                                                            f"the plan trains {trainable}")
    return layers


def _layout(t: TrainingSpec) -> dict[str, Any]:
    """How the plan lays a model out, whether its weights are read or not: attention implementation and dtype (bf16
    under bitsandbytes, whose 4-bit weights are stored and computed in bf16: `quantization`; fp32 where a Trainer
    recipe's script loads it so, training.load_dtype)."""
    dtype = torch.bfloat16 if t.method.quantises else torch.float32 if t.load_dtype is LoadDtype.FP32 else \
        _DTYPE[t.precision]
    return {"attn_implementation": _ATTENTION[t.attention], "dtype": dtype}


def _pretrained(cfg: RunConfig, bnb_config: Any) -> Any:
    kwargs = _layout(cfg.training)
    if bnb_config is not None:
        kwargs["quantization_config"] = bnb_config
        if cfg.training.zero_stage < 3:  # ZeRO-3 places (and partitions) the weights itself; transformers refuses both
            kwargs["device_map"] = {"": torch.cuda.current_device() if torch.cuda.is_available() else "cpu"}
    model: Any = _auto_class(load_config(cfg)).from_pretrained(cfg.model_path, **kwargs)
    model.config.use_cache = False
    return model


def load_reference_model(cfg: RunConfig) -> Any:
    """DPO's separate reference: the plan's model as loaded for training, without adapters, frozen."""
    from trl.trainer.utils import disable_dropout_in_model

    model = _pretrained(cfg, quantization(cfg.training))
    disable_dropout_in_model(model)
    model.requires_grad_(False)
    return model.eval()


def load_model(cfg: RunConfig, host: Host) -> Any:
    """The model ready for deepspeed.initialize: weights in the plan's dtype, adapters attached, the rest frozen
    (a vision tower trains only with training.train_vision_tower)."""
    bnb_config = quantization(cfg.training)
    return prepare_model(_pretrained(cfg, bnb_config), cfg.training, quantized=bnb_config is not None)


def from_config(config: Any, t: TrainingSpec) -> Any:
    """The model a plan trains, built from its config with random weights (no weights read) as `_pretrained`
    lays it out: same class, attention implementation and dtype, and eval mode, as from_pretrained returns it.
    benchmarks/simulate.py builds it under fake tensors to measure a full-size step."""
    model: Any = _auto_class(config).from_config(config, **_layout(t))
    model.config.use_cache = False
    return model.eval()


def reentrant_checkpointing(t: TrainingSpec) -> bool:
    """Whether the plan checkpoints reentrantly: a quantised model under ZeRO-3 (as TRL's SFTTrainer forces for PEFT
    under ZeRO-3). Non-reentrant checkpointing builds each layer's graph in forward, and bitsandbytes' matmul keeps
    the weight it multiplied for backward in its context (autograd._functions.MatMul4Bit: ctx.tensors), out of reach
    of checkpointing's saved-tensor hooks: ZeRO-3 releases the parameter, not that gathered storage, so every layer's
    gathered 4-bit weights stayed from forward to backward (simulated: Llama-3.1-8B QLoRA on 4 ranks peaked at 9.49
    GiB, 7.05 reentrant, make bench-simulate). A reentrant forward builds no graph."""
    return t.method.quantises and t.zero_stage == 3


def prepare_model(model: Any, t: TrainingSpec, quantized: bool = False) -> Any:
    """Checkpointing, adapters, frozen parts and DPO's dropout, as every run of the plan wraps its model. A quantised
    model is k-bit prepared (PEFT's fp32 casts of every dense parameter) for an fp32 step only: under mixed
    precision DeepSpeed casts the module back to bf16 or fp16, so the casts would only raise loading's peak — for a
    mixture of experts, whose expert tensors bitsandbytes leaves dense, by twice their bytes (planner.loading).
    Beyond the casts k-bit preparation checkpoints as asked and makes the input require grad, as transformers does
    for checkpointing itself; PEFT freezes the base.

    Checkpointing is non-reentrant, except for a quantised model under ZeRO-3 (`reentrant_checkpointing`)."""
    # PEFT is the ranks' import (the launcher, which checks plans with this module, starts seconds sooner) and TRL a
    # DPO rank's (1 s more a rank, with the datasets and pandas it imports)
    from peft import get_peft_model, prepare_model_for_kbit_training

    checkpointing = {"use_reentrant": reentrant_checkpointing(t)}
    if quantized and t.upcasts_when_loading:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=t.gradient_checkpointing,
                                                gradient_checkpointing_kwargs=checkpointing)
    elif t.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=checkpointing)
    frozen_vision = is_vision(model.config) and not t.train_vision_tower
    if t.method.uses_adapters:
        model = get_peft_model(model, lora_config(t.lora, model, frozen_vision=frozen_vision))
    elif frozen_vision:
        model.model.visual.requires_grad_(False)
    if t.method is Method.FREEZE:
        model.requires_grad_(False)
        for layer in _decoder_layers(model, t.freeze_trainable_layers)[-t.freeze_trainable_layers:]:
            layer.requires_grad_(True)
        if t.gradient_checkpointing:
            # transformers makes the embeddings' output require grad for checkpointing
            # (activation_checkpointing_enable), which puts every frozen layer in the graph: its input kept, its
            # backward run. With use_reentrant=False the trainable top layers need nothing from below, so the frozen
            # layers stay out
            model.disable_input_require_grads()
    if t.objective is Objective.DPO:
        from trl.trainer.utils import disable_dropout_in_model

        disable_dropout_in_model(model)  # TRL's DPOConfig.disable_dropout default: policy and reference agree
    # from_pretrained returns the model in eval mode (modeling_utils: "model.eval()  # Set model in evaluation mode")
    # and deepspeed.initialize leaves the mode as it is; in eval mode transformers' layers skip checkpointing
    # (modeling_layers.GradientCheckpointingLayer checks self.training) and dropout is off. Measured on an H100
    # before this line: QLoRA with checkpointing planned saved every layer's activations, 1.7-2.6x the plan.
    return model.train()

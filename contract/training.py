"""The training spec across the wire: proto <-> contract.schema.TrainingSpec, with the proto's defaults for what a
request leaves unset. The planner and the executor read a plan's training section through these two functions."""

from __future__ import annotations

from tunefleet.v1 import training_pb2

from contract.enums import from_proto, proto_table
from contract.errors import InvalidFieldError
from contract.schema import (
    DEFAULT_DPO_BETA,
    Attention,
    DpoSpec,
    LoadDtype,
    LoraSpec,
    Loss,
    Method,
    Objective,
    Offload,
    Optimizer,
    Precision,
    Recipe,
    Sharding,
    TrainingSpec,
)

DEFAULT_SEQUENCE_LENGTH = 2048
DEFAULT_LORA = LoraSpec()

METHOD = proto_table(Method, training_pb2.Method, "METHOD_")
PRECISION = proto_table(Precision, training_pb2.Precision, "PRECISION_")
OPTIMIZER = proto_table(Optimizer, training_pb2.Optimizer, "OPTIMIZER_")
OFFLOAD = proto_table(Offload, training_pb2.Offload, "OFFLOAD_")
ATTENTION = proto_table(Attention, training_pb2.Attention, "ATTENTION_")
LOSS = proto_table(Loss, training_pb2.Loss, "LOSS_")
OBJECTIVE = proto_table(Objective, training_pb2.Objective, "OBJECTIVE_")
RECIPE = proto_table(Recipe, training_pb2.Recipe, "RECIPE_")
SHARDING = proto_table(Sharding, training_pb2.Sharding, "SHARDING_")
LOAD_DTYPE = proto_table(LoadDtype, training_pb2.LoadDtype, "LOAD_DTYPE_")


def training_from_proto(p: training_pb2.TrainingSpec, world_size: int,
                        default_precision: Precision = Precision.BF16) -> TrainingSpec:
    """The spec a plan or request asks for, defaults filled in; `default_precision` stands where it names none (the
    planner picks fp16 for a GPU without bf16), except under torchtune, whose recipes train in bf16 throughout
    (bf16-pure)."""
    recipe: Recipe = from_proto(RECIPE, p.recipe, Recipe.TUNEFLEET, "training.recipe")
    if recipe is Recipe.TORCHTUNE:
        default_precision = Precision.BF16_PURE
    method: Method = from_proto(METHOD, p.method, Method.LORA, "training.method")
    lora = DEFAULT_LORA
    if p.HasField("lora"):
        lora = LoraSpec(
            rank=p.lora.rank or DEFAULT_LORA.rank, alpha=p.lora.alpha or DEFAULT_LORA.alpha,
            dropout=p.lora.dropout,
            target_modules=tuple(dict.fromkeys(p.lora.target_modules)) or DEFAULT_LORA.target_modules)
    for name in ("micro_batch_size", "sequence_length", "gradient_accumulation_steps"):
        if getattr(p, name) < 0:
            raise InvalidFieldError(f"training.{name}", "must not be negative")
    zero_stage = p.zero_stage if p.HasField("zero_stage") else (0 if world_size == 1 else 2)
    offload: Offload = from_proto(OFFLOAD, p.offload, Offload.NONE, "training.offload")
    return TrainingSpec(
        method=method,
        micro_batch_size=p.micro_batch_size or 1,
        sequence_length=p.sequence_length or DEFAULT_SEQUENCE_LENGTH,
        gradient_accumulation_steps=p.gradient_accumulation_steps or 1,
        precision=from_proto(PRECISION, p.precision, default_precision, "training.precision"),
        optimizer=from_proto(OPTIMIZER, p.optimizer, Optimizer.ADAMW, "training.optimizer"),
        zero_stage=zero_stage, offload=offload,
        gradient_checkpointing=p.gradient_checkpointing if p.HasField("gradient_checkpointing") else True,
        attention=from_proto(ATTENTION, p.attention, Attention.SDPA, "training.attention"),
        loss=from_proto(LOSS, p.loss, Loss.STANDARD, "training.loss"),
        lora=lora, double_quant=p.double_quant if p.HasField("double_quant") else True,
        objective=from_proto(OBJECTIVE, p.objective, Objective.SFT, "training.objective"),
        dpo_reference_model=p.dpo_reference_model, train_vision_tower=p.train_vision_tower,
        image_tokens=p.image_tokens, freeze_trainable_layers=p.freeze_trainable_layers, dpo=_dpo(p),
        recipe=recipe,
        sharding=from_proto(SHARDING, p.sharding, Sharding.DEEPSPEED, "training.sharding"),
        load_dtype=from_proto(LOAD_DTYPE, p.load_dtype, LoadDtype.BF16, "training.load_dtype"), liger=p.liger,
        transformers_version=p.transformers_version,
    )


def _dpo(p: training_pb2.TrainingSpec) -> DpoSpec:
    d = p.dpo
    return DpoSpec(beta=d.beta if d.HasField("beta") else DEFAULT_DPO_BETA, label_smoothing=d.label_smoothing,
                   sft_weight=d.sft_weight, precompute_reference=d.precompute_reference)


def training_to_proto(t: TrainingSpec) -> training_pb2.TrainingSpec:
    return training_pb2.TrainingSpec(
        method=METHOD[t.method], precision=PRECISION[t.precision], optimizer=OPTIMIZER[t.optimizer],
        zero_stage=t.zero_stage, offload=OFFLOAD[t.offload], gradient_checkpointing=t.gradient_checkpointing,
        attention=ATTENTION[t.attention], loss=LOSS[t.loss], micro_batch_size=t.micro_batch_size,
        sequence_length=t.sequence_length, gradient_accumulation_steps=t.gradient_accumulation_steps,
        objective=OBJECTIVE[t.objective], dpo_reference_model=t.dpo_reference_model,
        train_vision_tower=t.train_vision_tower, image_tokens=t.image_tokens,
        freeze_trainable_layers=t.freeze_trainable_layers, double_quant=t.double_quant, recipe=RECIPE[t.recipe],
        sharding=SHARDING[t.sharding], load_dtype=LOAD_DTYPE[t.load_dtype], liger=t.liger,
        transformers_version=t.transformers_version,
        dpo=training_pb2.DpoSpec(beta=t.dpo.beta, label_smoothing=t.dpo.label_smoothing,
                                 sft_weight=t.dpo.sft_weight, precompute_reference=t.dpo.precompute_reference)
        if t.objective is Objective.DPO else None,
        lora=training_pb2.LoraSpec(rank=t.lora.rank, alpha=t.lora.alpha, dropout=t.lora.dropout,
                                   target_modules=list(t.lora.target_modules)))

"""The hf-trainer and trl-sft recipes' memory models (planner/recipes.py) against the executor's, term by term, and
the jobs they do not cover refused by name. Their totals are held to Trainer.train() and SFTTrainer.train()
themselves, simulated (make bench-simulate, tests/benchmarks/test_simulate.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from contract.schema import (
    ALL_LINEAR,
    DpoSpec,
    LoadDtype,
    LoraSpec,
    Method,
    Objective,
    Offload,
    Precision,
    Recipe,
    Sharding,
    TrainingSpec,
    Workload,
)
from contract.training import training_from_proto, training_to_proto
from planner.catalog import default_catalog
from planner.errors import UnsupportedError
from planner.memory import gpu_memory
from planner.parameters import parameter_split
from planner.search import Constraints, recommend

CATALOG = default_catalog()
LLAMA = CATALOG.model("meta-llama/Llama-3.1-8B").architecture
EVERY = LoraSpec(target_modules=(ALL_LINEAR,))


def _both(t: TrainingSpec) -> tuple:
    return gpu_memory(LLAMA, t, 1), gpu_memory(LLAMA, replace(t, recipe=Recipe.HF_TRAINER), 1)


def test_lora_under_the_trainer_holds_what_the_executor_holds_with_fp32_adapters() -> None:
    ours, theirs = _both(TrainingSpec(method=Method.LORA, micro_batch_size=2, lora=EVERY))
    assert (theirs.weights_bytes, theirs.activations_bytes) == (ours.weights_bytes, ours.activations_bytes)
    # 4 + 4 + 8 bytes a trainable parameter against DeepSpeed's 2 + 2 + 12
    held = [b.adapter_bytes + b.gradients_bytes + b.optimizer_bytes for b in (ours, theirs)]
    assert held[0] == held[1]
    assert theirs.adapter_bytes == 2 * ours.adapter_bytes  # fp32, not bf16
    assert theirs.gradients_bytes == 2 * ours.gradients_bytes
    # AdamW's two fp32 states and no master copy: 8 bytes a parameter against DeepSpeed's 12
    assert 3 * theirs.optimizer_bytes == 2 * ours.optimizer_bytes


def test_qlora_under_the_trainer_keeps_the_rest_of_the_model_and_its_activations_in_fp32() -> None:
    t = TrainingSpec(method=Method.QLORA, sequence_length=4096, lora=EVERY)
    ours, theirs = _both(t)
    split = parameter_split(LLAMA, t.method, t.lora, False, 0)
    assert theirs.weights_bytes - ours.weights_bytes == 2 * (split.total - split.quantised)
    # every checkpointed layer's input in fp32 and autocast's bf16 copy of the head, at least
    fp32_inputs = 2 * LLAMA.hidden_size * 4096 * LLAMA.num_layers
    head_copy = 2 * LLAMA.vocab_size * LLAMA.hidden_size
    assert theirs.activations_bytes - ours.activations_bytes >= fp32_inputs + head_copy


def test_the_trainer_under_deepspeed_holds_the_executors_state_with_llama_factorys_buckets() -> None:
    """hf-trainer under ZeRO 2-3: DeepSpeed's engine keeps the bf16 model, fp32 master and AdamW states as the
    executor's does; what differs is LLaMA-Factory's buckets and torch AdamW's foreach step beside the fp32
    gradients."""
    t = TrainingSpec(method=Method.FULL, zero_stage=2)
    ours, theirs = gpu_memory(LLAMA, t, 4), gpu_memory(LLAMA, replace(t, recipe=Recipe.HF_TRAINER), 4)
    assert (theirs.weights_bytes, theirs.gradients_bytes, theirs.optimizer_bytes) == \
        (ours.weights_bytes, ours.gradients_bytes, ours.optimizer_bytes)
    # ds_z2_config.json's 5e8-element bf16 reduce bucket, held through backward only, not overlapped
    assert (theirs.reduce_bucket_bytes, theirs.deepspeed_buffers_bytes) == (500_000_000 * 2, 0)
    assert ours.reduce_bucket_bytes == 50_000_000 * 2 * 2  # the executor's, double-buffered by overlap_comm
    partition = parameter_split(LLAMA, Method.FULL, t.lora, False, 0).trainable / 4
    assert theirs.optimizer_step_bytes == pytest.approx(partition * (4 + 4))  # fp32 gradients + foreach temporary
    assert ours.optimizer_step_bytes == pytest.approx(partition * (2 + 4))  # flattened bf16 + fp32 gradients
    # ZeRO-3: hidden²-element reduce bucket ("auto"), held throughout
    z3 = gpu_memory(LLAMA, replace(t, zero_stage=3, recipe=Recipe.HF_TRAINER), 4)
    assert (z3.deepspeed_buffers_bytes, z3.reduce_bucket_bytes) == (LLAMA.hidden_size ** 2 * 2, 0)


def test_qlora_under_the_trainers_deepspeed_stays_bf16() -> None:
    """DeepSpeed's bf16 engine casts what prepare_model_for_kbit_training made fp32 back to bf16."""
    t = TrainingSpec(method=Method.QLORA, lora=EVERY, zero_stage=2)
    ours, theirs = gpu_memory(LLAMA, t, 2), gpu_memory(LLAMA, replace(t, recipe=Recipe.HF_TRAINER), 2)
    assert (theirs.weights_bytes, theirs.activations_bytes) == (ours.weights_bytes, ours.activations_bytes)


def test_the_recipe_round_trips_through_the_proto() -> None:
    t = TrainingSpec(method=Method.QLORA, recipe=Recipe.HF_TRAINER)
    assert training_from_proto(training_to_proto(t), 1).recipe is Recipe.HF_TRAINER
    assert training_from_proto(training_to_proto(TrainingSpec()), 1).recipe is Recipe.TUNEFLEET


def test_fsdp_shards_the_trainers_state_and_holds_the_root_and_one_layer_gathered() -> None:
    """hf-trainer under FSDP on 8 ranks against the same Trainer on one GPU: the weights, adapters, their gradients
    and AdamW's states an eighth each; the root unit (embedding, output head, final norm) and one decoder layer
    gathered in bf16 beside the step's own activations, which are the one-GPU step's."""
    t = TrainingSpec(method=Method.LORA, micro_batch_size=2, sequence_length=2048, lora=EVERY, recipe=Recipe.HF_TRAINER)
    one = gpu_memory(LLAMA, t, 1)
    sharded = gpu_memory(LLAMA, replace(t, sharding=Sharding.FSDP, zero_stage=3), 8)
    assert sharded.weights_bytes == pytest.approx(one.weights_bytes / 8, abs=1)
    for term in ("adapter_bytes", "gradients_bytes", "optimizer_bytes"):
        assert getattr(sharded, term) == pytest.approx(getattr(one, term) / 8, abs=1)
    h, kv = LLAMA.hidden_size, LLAMA.num_key_value_heads * LLAMA.hidden_size // LLAMA.num_attention_heads
    layer = (h * (2 * h + 2 * kv + 3 * LLAMA.intermediate_size) + 2 * h) * 2  # FSDP's flat parameter: 218,112,000
    root = (2 * LLAMA.vocab_size * h + h) * 2
    # (the planner spreads the final norm's 4,096 weights over the 32 layers: 8 KiB apart)
    assert sharded.gathered_parameters_bytes == pytest.approx(root + layer, abs=8192)
    assert sharded.activations_bytes == one.activations_bytes


def test_fsdp_upcasts_a_full_fine_tunes_weights_to_fp32() -> None:
    """accelerate upcasts FSDP's trained parameters to fp32: a full fine-tune's shards, gradients and AdamW states are
    fp32 (16 bytes a parameter over the ranks), where the Trainer alone trains the bf16 weights (8 bytes)."""
    t = TrainingSpec(method=Method.FULL, sequence_length=2048, recipe=Recipe.HF_TRAINER, sharding=Sharding.FSDP,
                     zero_stage=3)
    m = gpu_memory(LLAMA, t, 4)
    total = parameter_split(LLAMA, Method.FULL, t.lora, False, 0).total
    assert m.weights_bytes + m.gradients_bytes + m.optimizer_bytes == pytest.approx(16 * total / 4, rel=1e-6)


def test_fsdp_keeps_the_frozen_shards_in_the_dtype_the_script_loaded() -> None:
    """A model loaded in fp32 keeps fp32 frozen shards under FSDP; the gathered units and activations are bf16 either
    way, and a full fine-tune's shards are fp32 whatever it was loaded in (accelerate's upcast)."""
    t = TrainingSpec(method=Method.LORA, lora=EVERY, recipe=Recipe.HF_TRAINER, sharding=Sharding.FSDP, zero_stage=3)
    bf16, fp32 = gpu_memory(LLAMA, t, 8), gpu_memory(LLAMA, replace(t, load_dtype=LoadDtype.FP32), 8)
    assert fp32.weights_bytes == 2 * bf16.weights_bytes
    assert (fp32.activations_bytes, fp32.gathered_parameters_bytes) == (bf16.activations_bytes,
                                                                        bf16.gathered_parameters_bytes)
    full = replace(t, method=Method.FULL)
    assert gpu_memory(LLAMA, full, 8) == gpu_memory(LLAMA, replace(full, load_dtype=LoadDtype.FP32), 8)


def test_fsdp_shards_qlora_s_packed_weights_and_holds_every_quantisation_constant_on_every_rank() -> None:
    """Sharded QLoRA (not k-bit prepared: a bf16 stream): FSDP flattens the 4-bit weights, packed two to a byte and
    stored as bf16, with the rest of their layer and shards them; the absmax constants are the modules' attributes,
    which every rank holds whole. A layer's unit gathers its packed weights and norms."""
    t = TrainingSpec(method=Method.QLORA, lora=EVERY, recipe=Recipe.HF_TRAINER, sharding=Sharding.FSDP, zero_stage=3)
    split = parameter_split(LLAMA, Method.QLORA, EVERY, False, 0)
    two, four = gpu_memory(LLAMA, t, 2), gpu_memory(LLAMA, t, 4)
    sharded = 0.5 * split.quantised + 2 * (split.total - split.quantised)
    assert two.weights_bytes - four.weights_bytes == pytest.approx(sharded / 4, abs=2)
    one = gpu_memory(LLAMA, replace(t, sharding=Sharding.DEEPSPEED, zero_stage=0), 1)
    assert one.activations_bytes > two.activations_bytes  # the one-GPU Trainer's k-bit prepared fp32 stream


def test_the_sharding_round_trips_through_the_proto() -> None:
    t = TrainingSpec(recipe=Recipe.HF_TRAINER, sharding=Sharding.FSDP, zero_stage=3, load_dtype=LoadDtype.FP32)
    back = training_from_proto(training_to_proto(t), 2)
    assert (back.sharding, back.load_dtype) == (Sharding.FSDP, LoadDtype.FP32)
    assert training_from_proto(training_to_proto(TrainingSpec()), 1).sharding is Sharding.DEEPSPEED


def test_trl_sft_s_fused_head_replaces_the_logits_with_one_tile_and_the_gathered_hidden_states() -> None:
    t = TrainingSpec(method=Method.LORA, micro_batch_size=2, sequence_length=2048, lora=EVERY)
    trainer = gpu_memory(LLAMA, replace(t, recipe=Recipe.HF_TRAINER), 1)
    sft = gpu_memory(LLAMA, replace(t, recipe=Recipe.TRL_SFT), 1)
    labelled = 2 * 2047
    # the head's backward: an fp32 and a bf16 gradient of the gathered hidden states and one bf16 tile of up to
    # 4,096 tokens by 32,768 columns
    assert sft.logits_bytes == labelled * LLAMA.hidden_size * (4 + 2) + min(labelled, 4096) * 32768 * 2
    # fp32 log-probabilities over the vocabulary are what the trainer's loss keeps; the fused head never builds them
    assert trainer.activations_bytes - sft.activations_bytes > labelled * LLAMA.vocab_size * 4
    # the same fp32 adapters and AdamW states; the fused step keeps no temporary
    assert (sft.adapter_bytes, sft.optimizer_bytes) == (trainer.adapter_bytes, trainer.optimizer_bytes)
    assert trainer.optimizer_step_bytes > 0 == sft.optimizer_step_bytes


def test_trl_sft_qlora_keeps_the_model_in_bf16_and_casts_the_adapters_to_bf16() -> None:
    t = TrainingSpec(method=Method.QLORA, sequence_length=4096, lora=EVERY)
    ours, trainer = _both(t)
    sft = gpu_memory(LLAMA, replace(t, recipe=Recipe.TRL_SFT), 1)
    assert sft.weights_bytes == ours.weights_bytes < trainer.weights_bytes  # no prepare_model_for_kbit_training
    assert 2 * sft.adapter_bytes == trainer.adapter_bytes
    assert 2 * sft.optimizer_bytes == trainer.optimizer_bytes  # AdamW's states take the bf16 adapters' dtype


# (model, change, ranks, words); QLoRA without checkpointing is refused for hf-trainer alone (SFTTrainer does not
# prepare a k-bit model, so its QLoRA is modelled either way), and hf-trainer alone is modelled under DeepSpeed
REFUSED = [
    ("meta-llama/Llama-3.1-8B", dict(method=Method.FREEZE, freeze_trainable_layers=2), 1, "lora, qlora and full"),
    ("meta-llama/Llama-3.1-8B", dict(method=Method.FULL, precision=Precision.FP32), 1, "--precision bf16"),
    ("meta-llama/Llama-3.1-8B", dict(offload=Offload.OPTIMIZER, zero_stage=2), 2, "without offload"),
    ("meta-llama/Llama-3.1-8B", dict(objective=Objective.DPO), 1, "supervised fine-tuning"),
    ("bigcode/starcoder2-3b", {}, 1, "dense RMSNorm decoders"),
    ("mistralai/Mixtral-8x7B-v0.1", {}, 1, "dense RMSNorm decoders"),
]
FIELD = "training.recipe"
CASES = [(recipe, *case, FIELD) for recipe in (Recipe.HF_TRAINER, Recipe.TRL_SFT) for case in REFUSED] + [
    (Recipe.HF_TRAINER, "meta-llama/Llama-3.1-8B", dict(method=Method.QLORA, gradient_checkpointing=False), 1,
     "--grad-ckpt", FIELD),
    *[(recipe, "meta-llama/Llama-3.1-8B", change, 2, words, field) for recipe in (Recipe.HF_TRAINER, Recipe.TRL_SFT)
      for change, words, field in ((dict(), "is modelled on one GPU", FIELD),
                                   (dict(zero_stage=1), "ZeRO 2 or 3", "training.zero_stage"),
                                   (dict(method=Method.QLORA, zero_stage=3), "checkpoints reentrantly",
                                    "training.zero_stage"))]]


DPO = dict(objective=Objective.DPO)
CASES += [(Recipe.TRL_DPO, "meta-llama/Llama-3.1-8B", change, ranks, words, field) for change, ranks, words, field in (
    ({}, 1, "--dpo", "training.objective"),
    (dict(DPO, gradient_checkpointing=False), 1, "--grad-ckpt", "training.gradient_checkpointing"),
    (dict(DPO), 2, "is modelled on one GPU", FIELD),
    (dict(DPO, zero_stage=3), 4, "under ZeRO-2", "training.zero_stage"),
    (dict(DPO, dpo_reference_model=True), 1, "adapter off", "training.dpo_reference_model"))]
CASES += [(Recipe.HF_TRAINER, "meta-llama/Llama-3.1-8B", DPO, 1, "plan DPO with recipe trl-dpo", FIELD)]
FSDP = dict(sharding=Sharding.FSDP, zero_stage=3)
CASES += [(recipe, "meta-llama/Llama-3.1-8B", dict(FSDP, **change), ranks, words, "training.sharding")
          for recipe, change, ranks, words in (
              (Recipe.TUNEFLEET, {}, 2, "--recipe hf-trainer"), (Recipe.TRL_SFT, {}, 2, "--recipe hf-trainer"),
              (Recipe.HF_TRAINER, dict(method=Method.LORA_8BIT), 2, "not lora-8bit"),
              (Recipe.HF_TRAINER, {}, 1, "several GPUs"))]
CASES += [(Recipe.HF_TRAINER, "meta-llama/Llama-3.1-8B", dict(load_dtype=LoadDtype.FP32, **change), ranks,
           "modelled under FSDP so far", "training.load_dtype")
          for change, ranks in (({}, 1), (dict(zero_stage=3), 2))]
CASES += [(recipe, "meta-llama/Llama-3.1-8B", dict(gradient_checkpointing=False, lora=LoraSpec(dropout=0.0)), 1,
           "without LoRA dropout", "training.gradient_checkpointing") for recipe in (Recipe.HF_TRAINER, Recipe.TRL_SFT)]


@pytest.mark.parametrize(("recipe", "model", "change", "ranks", "words", "field"), CASES)
def test_what_the_trainer_model_does_not_cover_is_refused_by_name(recipe: Recipe, model: str, change: dict, ranks: int,
                                                                  words: str, field: str) -> None:
    t = replace(TrainingSpec(recipe=recipe), **change)
    with pytest.raises(UnsupportedError, match=words) as caught:
        gpu_memory(CATALOG.model(model).architecture, t, ranks)
    assert caught.value.field == field


def test_the_executors_recipe_is_unchanged_by_the_trainers_terms() -> None:
    t = TrainingSpec(method=Method.QLORA, lora=EVERY)
    assert gpu_memory(LLAMA, t, 1) == gpu_memory(LLAMA, replace(t, recipe=Recipe.TUNEFLEET), 1)


def test_qlora_quantises_the_linears_of_a_mixture_of_experts_not_its_expert_tensors() -> None:
    mixtral = CATALOG.model("mistralai/Mixtral-8x7B-v0.1").architecture
    split = parameter_split(mixtral, Method.QLORA, EVERY, False, 0)
    experts = mixtral.num_layers * mixtral.num_experts * 3 * mixtral.hidden_size * mixtral.intermediate_size
    # transformers' replace_with_bnb_linear swaps nn.Linear modules; the fused experts are 3-D parameters
    assert split.quantised < split.total - experts
    assert gpu_memory(mixtral, TrainingSpec(method=Method.QLORA, lora=EVERY), 1).weights_bytes >= 2 * experts


@pytest.mark.parametrize("recipe", [Recipe.HF_TRAINER, Recipe.TRL_SFT])
def test_a_full_fine_tune_under_a_trainer_keeps_bf16_weights_gradients_and_states_without_a_master_copy(
        recipe: Recipe) -> None:
    t = TrainingSpec(method=Method.FULL, sequence_length=2048)
    ours = gpu_memory(LLAMA, t, 1)
    theirs = gpu_memory(LLAMA, replace(t, recipe=recipe), 1)
    params = parameter_split(LLAMA, Method.FULL, t.lora, False, 0).trainable
    assert theirs.weights_bytes == ours.weights_bytes == 2 * params
    assert (theirs.gradients_bytes, theirs.optimizer_bytes) == (2 * params, 4 * params)
    assert ours.optimizer_bytes == 12 * params  # DeepSpeed's fp32 master copy and states
    # torch's foreach AdamW (hf-trainer's adamw_torch) keeps a bf16 temporary per parameter; the fused step none
    assert theirs.optimizer_step_bytes == (2 * params if recipe is Recipe.HF_TRAINER else 0)


def test_recommend_plans_a_trainer_recipe_on_several_gpus_under_its_deepspeed() -> None:
    """A 70B LoRA does not fit one 80 GB GPU under the Trainer; under its DeepSpeed ZeRO 2-3 it does on several, and
    every option Recommend returns is a layout the recipe's model covers."""
    model = CATALOG.model("meta-llama/Llama-3.1-70B")
    base = TrainingSpec(method=Method.LORA, lora=EVERY, recipe=Recipe.HF_TRAINER)
    found = recommend(model, base, Workload(dataset_tokens=10_000_000), Constraints(allowed_gpus=("h100-sxm-80gb",)),
                      CATALOG, limit=50)
    assert found.candidates
    for c in found.candidates:
        t, hw = c.fit.training, c.fit.hardware
        assert t.recipe is Recipe.HF_TRAINER and hw.world_size > 1 and t.zero_stage in (2, 3)
        assert t.offload is Offload.NONE


def test_trl_dpo_scores_chosen_and_rejected_through_trl_sft_s_head() -> None:
    """DPOTrainer over a micro-batch of pairs is SFTTrainer's step over twice the rows (dropout off, as DPOConfig
    turns it off): the same activations and fused head, the same adapters and optimizer; a full fine-tune adds the
    frozen reference copy, and precomputed log-probs hold none."""
    no_dropout = LoraSpec(target_modules=(ALL_LINEAR,), dropout=0.0)
    t = TrainingSpec(method=Method.LORA, micro_batch_size=1, sequence_length=2048, lora=no_dropout)
    dpo = gpu_memory(LLAMA, replace(t, recipe=Recipe.TRL_DPO, objective=Objective.DPO), 1)
    sft = gpu_memory(LLAMA, replace(t, recipe=Recipe.TRL_SFT, micro_batch_size=2), 1)
    assert (dpo.activations_bytes, dpo.logits_bytes) == (sft.activations_bytes, sft.logits_bytes)
    assert (dpo.adapter_bytes, dpo.optimizer_bytes, dpo.weights_bytes) == \
        (sft.adapter_bytes, sft.optimizer_bytes, sft.weights_bytes)
    full = replace(t, method=Method.FULL, recipe=Recipe.TRL_DPO, objective=Objective.DPO)
    before_training = replace(full, dpo=DpoSpec(precompute_reference=True))
    copy, precomputed = gpu_memory(LLAMA, full, 1), gpu_memory(LLAMA, before_training, 1)
    assert copy.weights_bytes == 2 * precomputed.weights_bytes


def test_trl_dpo_under_zero_2_is_trl_sft_s_zero_2_step_over_twice_the_rows() -> None:
    """Under the Trainer's ZeRO-2 (simulated: Llama-3.1-8B LoRA and QLoRA on 2 ranks, Llama-3.2-1B full with its
    whole frozen copy on 4, within -0.2 %..0.0 %) the pairs go through trl-sft's ZeRO-2 step as twice the rows."""
    no_dropout = LoraSpec(target_modules=(ALL_LINEAR,), dropout=0.0)
    t = TrainingSpec(method=Method.LORA, micro_batch_size=1, sequence_length=2048, lora=no_dropout, zero_stage=2)
    dpo = gpu_memory(LLAMA, replace(t, recipe=Recipe.TRL_DPO, objective=Objective.DPO), 2)
    sft = gpu_memory(LLAMA, replace(t, recipe=Recipe.TRL_SFT, micro_batch_size=2), 2)
    assert dpo.total_bytes == sft.total_bytes
    assert dpo.reduce_bucket_bytes > 0

"""torchtune's single-device recipes in the planner (planner/torchtune.py): each decoder layer of torchtune's own
model saves what the planner counts, byte for byte (saved_tensors_hooks on torchtune's modules, measured in
.venv-torchtune by benchmarks/torchtune_probe.py); the plans the recipe does not cover are refused naming the field to
change; the CLI plans one."""

from __future__ import annotations

import dataclasses
import json

import pytest

from benchmarks.torchtune_probe import MICRO_BATCH, SEQUENCE
from benchmarks.torchtune_recipe import in_torchtune_venv
from contract.model import Architecture, Family
from contract.schema import ALL_LINEAR, Attention, LoraSpec, Method, Precision, Recipe, TrainingSpec
from planner import torchtune
from planner.activations import decoder_layer_saved_bytes
from planner.catalog import default_catalog
from planner.errors import UnsupportedError
from planner.parameters import parameter_split
from tests.clients.test_cli import tunefleet

TINY = Architecture(family=Family.LLAMA, num_layers=2, hidden_size=64, intermediate_size=160, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=96, max_position_embeddings=64)
ALL_NO_DROPOUT = LoraSpec(target_modules=(ALL_LINEAR,), dropout=0.0)


def _spec(method: Method, lora: LoraSpec = ALL_NO_DROPOUT) -> TrainingSpec:
    return TrainingSpec(method=method, micro_batch_size=MICRO_BATCH, sequence_length=SEQUENCE,
                        gradient_checkpointing=False, lora=lora, recipe=Recipe.TORCHTUNE,
                        precision=Precision.BF16_PURE)


CASES = [(Family.LLAMA, Method.FULL), (Family.LLAMA, Method.LORA), (Family.QWEN2, Method.LORA),
         (Family.MISTRAL, Method.FULL)]


@pytest.mark.layered
@pytest.mark.parametrize(("family", "method"), CASES, ids=[f"{f.value}-{m.value}" for f, m in CASES])
def test_a_torchtune_layer_saves_what_the_planner_counts(family: Family, method: Method) -> None:
    """torchtune's layer differs from transformers': its RMSNorm normalises in fp32 (the normalised input saved fp32
    where the weight trains) and its attention expands k and v to every head before SDPA."""
    a = dataclasses.replace(TINY, family=family, attention_bias=family is Family.QWEN2)
    t = _spec(method)
    fields = {**dataclasses.asdict(a), "family": family.value}
    measured = in_torchtune_venv("benchmarks.torchtune_probe", "layers", json.dumps(fields), method.value)
    split = parameter_split(a, t.method, t.lora, t.train_vision_tower, t.freeze_trainable_layers)
    planned = decoder_layer_saved_bytes(a, t, split, MICRO_BATCH * SEQUENCE)
    # the first layer's input needs no gradient where the embeddings are frozen (LoRA): it saves less
    assert measured[-1] == planned
    assert measured[0] <= planned


def test_torchtune_plans_are_refused_where_the_recipes_do_not_reach() -> None:
    catalog = default_catalog()
    llama = catalog.model("meta-llama/Llama-3.1-8B").architecture
    gemma = catalog.model("google/gemma-2-9b").architecture
    refusals = [(gemma, _spec(Method.LORA), 1, "training.recipe"),
                (llama, _spec(Method.QLORA), 1, "training.method"),
                (llama, TrainingSpec(method=Method.LORA, recipe=Recipe.TORCHTUNE), 1, "training.precision"),
                (llama, _spec(Method.LORA), 2, "training.recipe"),
                (llama, TrainingSpec(method=Method.LORA, recipe=Recipe.TORCHTUNE, precision=Precision.BF16_PURE,
                                     attention=Attention.EAGER), 1, "training.attention"),
                (llama, _spec(Method.LORA, LoraSpec(target_modules=("q_proj", "up_proj"))), 1,
                 "training.lora.target_modules")]
    for a, t, gpus, field in refusals:
        with pytest.raises(UnsupportedError) as refused:
            torchtune.check(a, t, gpus)
        assert refused.value.field == field


def test_the_cli_plans_a_torchtune_run_in_bf16_throughout_and_refuses_mixed_precision() -> None:
    args = ("fit", "--model", "meta-llama/Llama-3.2-1B", "--method", "lora", "--gpu", "a100-80gb", "--micro-batch",
            "2", "--seq-len", "2048", "--recipe", "torchtune", "--json")
    mixed = tunefleet(*args, "--precision", "bf16")
    assert mixed.returncode == 2 and "training.precision" in mixed.stderr and "bf16-pure" in mixed.stderr
    planned, named = tunefleet(*args), tunefleet(*args, "--precision", "bf16-pure")
    assert planned.returncode == 0, planned.stderr
    # unnamed, the precision is the recipe's own: the same plan as bf16-pure named
    assert json.loads(planned.stdout)["per_gpu"] == json.loads(named.stdout)["per_gpu"]
    per_gpu = json.loads(planned.stdout)["per_gpu"]
    # the chunked loss keeps every chunk's fp32 log-softmax and the bf16 output chunks: 6 bytes a logit and more
    assert int(per_gpu["logits_bytes"]) > 2 * 2048 * 128256 * 6

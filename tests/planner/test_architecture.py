"""Parameter and adapter counts computed from shapes equal what transformers and PEFT build."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from contract.schema import LoraSpec  # noqa: E402
from executor.training.peft_config import lora_targets as executor_lora_targets  # noqa: E402
from planner.architecture import lora_parameter_count, lora_targets, parameter_counts  # noqa: E402
from planner.catalog import default_catalog  # noqa: E402
from planner.hf_config import architecture_from_config  # noqa: E402
from tests.fixtures.hf_configs import hf_config  # noqa: E402

CATALOG_MODELS = [
    "meta-llama/Llama-2-7b-hf", "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.2-1B", "mistralai/Mistral-7B-v0.3",
    "mistralai/Mixtral-8x7B-v0.1", "Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-0.5B", "Qwen/Qwen2-VL-2B-Instruct",
    "google/gemma-2-2b", "microsoft/Phi-3-mini-4k-instruct", "openai-community/gpt2", "Qwen/Qwen3-0.6B",
    "Qwen/Qwen3-8B", "allenai/OLMo-2-1124-7B", "Qwen/Qwen3-30B-A3B",
    "google/gemma-3-1b-pt", "microsoft/phi-2", "Qwen/Qwen1.5-MoE-A2.7B", "bigcode/starcoder2-3b",
    "bigcode/starcoder2-15b", "deepseek-ai/DeepSeek-V3", "moonshotai/Moonlight-16B-A3B", "moonshotai/Kimi-K2-Instruct",
    "zai-org/GLM-4.5", "zai-org/GLM-4.5-Air", "deepseek-ai/DeepSeek-V2", "deepseek-ai/DeepSeek-V2-Lite",
    "openai/gpt-oss-20b", "openai/gpt-oss-120b", "Qwen/Qwen2.5-VL-3B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct",
    "google/gemma-3-4b-pt", "google/gemma-3-27b-pt", "meta-llama/Llama-4-Scout-17B-16E",
    "meta-llama/Llama-4-Maverick-17B-128E",
]


def meta_model(config: transformers.PretrainedConfig) -> torch.nn.Module:
    with torch.device("meta"):
        if isinstance(config, transformers.Qwen2VLConfig | transformers.Qwen2_5_VLConfig | transformers.Gemma3Config):
            return transformers.AutoModelForImageTextToText.from_config(config)
        return transformers.AutoModelForCausalLM.from_config(config)


def numel(model: torch.nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


@pytest.mark.parametrize("name", CATALOG_MODELS)
def test_parameter_count_equals_transformers(name: str) -> None:
    arch = default_catalog().model(name).architecture
    assert parameter_counts(arch).total == numel(meta_model(hf_config(arch)))


@pytest.mark.parametrize("name", CATALOG_MODELS)
def test_config_json_round_trip_gives_the_same_architecture_count(name: str) -> None:
    arch = default_catalog().model(name).architecture
    text = hf_config(arch).to_json_string()
    parsed = architecture_from_config(text)
    assert parsed.family is arch.family
    assert parameter_counts(parsed).total == parameter_counts(arch).total


@pytest.mark.parametrize(("model_type", "shape"), [
    ("smollm3", dict(num_hidden_layers=36, hidden_size=2048, intermediate_size=11008, num_attention_heads=16,
                     num_key_value_heads=4, vocab_size=128256, tie_word_embeddings=True)),  # SmolLM3-3B
    ("qwen3", dict(num_hidden_layers=28, hidden_size=1024, intermediate_size=3072, num_attention_heads=16,
                   num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True)),  # Qwen3-0.6B
])
def test_a_config_json_of_each_model_type_counts_what_transformers_builds(model_type: str, shape: dict) -> None:
    config = transformers.AutoConfig.for_model(model_type, **shape)
    assert parameter_counts(architecture_from_config(config.to_json_string())).total == numel(meta_model(config))


@pytest.mark.parametrize(("name", "targets", "rank"), [
    ("meta-llama/Llama-3.1-8B", ("q_proj", "v_proj"), 16),
    ("meta-llama/Llama-3.1-8B", ("all-linear",), 8),
    ("Qwen/Qwen2.5-0.5B", ("all-linear",), 64),
    ("microsoft/Phi-3-mini-4k-instruct", ("qkv_proj", "o_proj"), 32),
    ("openai-community/gpt2", ("c_attn",), 8),
    ("google/gemma-2-2b", ("all-linear",), 16),
    ("Qwen/Qwen3-0.6B", ("all-linear",), 16),
    ("microsoft/phi-2", ("all-linear",), 16),
    ("bigcode/starcoder2-3b", ("all-linear",), 16),
    ("bigcode/starcoder2-3b", ("c_fc", "c_proj"), 8),
    ("moonshotai/Moonlight-16B-A3B", ("all-linear",), 16),
    ("deepseek-ai/DeepSeek-V3", ("q_a_proj", "kv_b_proj", "o_proj"), 8),
    ("zai-org/GLM-4.5-Air", ("all-linear",), 8),
    ("openai/gpt-oss-20b", ("all-linear",), 16),
    ("meta-llama/Llama-4-Scout-17B-16E", ("all-linear",), 16),
    ("meta-llama/Llama-4-Maverick-17B-128E", ("all-linear",), 8),
    ("meta-llama/Llama-4-Maverick-17B-128E", ("gate_proj", "down_proj"), 8),
])
def test_lora_parameter_count_equals_peft(name: str, targets: tuple[str, ...], rank: int) -> None:
    arch = default_catalog().model(name).architecture
    model = meta_model(hf_config(arch))
    # what the executor hands PEFT for a mixture of experts (all-linear: its linear modules, by name)
    target_arg: str | list[str] = executor_lora_targets(LoraSpec(rank=rank, target_modules=targets), model) \
        if arch.num_experts else targets[0] if targets == ("all-linear",) else list(targets)
    config = peft.LoraConfig(r=rank, target_modules=target_arg, task_type="CAUSAL_LM")
    peft_model = peft.get_peft_model(model, config)
    predicted = lora_parameter_count(lora_targets(arch, targets, "t"), rank)
    assert predicted == numel(peft_model, trainable_only=True)


def test_malformed_config_json_names_the_problem() -> None:
    from planner.errors import InvalidFieldError, UnsupportedError
    with pytest.raises(InvalidFieldError, match="not valid JSON"):
        architecture_from_config("{not json")
    with pytest.raises(InvalidFieldError, match="missing 'num_attention_heads'"):
        architecture_from_config(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    with pytest.raises(UnsupportedError, match="model_type 'bert'"):
        architecture_from_config(json.dumps({"model_type": "bert"}))


def test_an_unknown_model_type_in_the_llama_layout_is_answered_as_llama_with_a_note() -> None:
    from contract.model import Family
    from planner.errors import UnsupportedError
    from planner.hf_config import read_config

    qwen3_8b = {"model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36, "intermediate_size": 12288,
                "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                "tie_word_embeddings": False}
    arch, note = read_config(json.dumps(qwen3_8b))
    assert arch.family is Family.QWEN3 and note == "" and parameter_counts(arch).total == 8_190_735_360
    arch, note = read_config(json.dumps({**qwen3_8b, "model_type": "acme_lm"}))
    assert arch.family is Family.LLAMA and "'acme_lm' is not one the planner models" in note
    # the Llama layout misses only Qwen3's q/k norms (36 x 2 x 128)
    assert parameter_counts(arch).total == 8_190_735_360 - 36 * 2 * 128
    assert read_config(json.dumps({**qwen3_8b, "model_type": "llama"}))[1] == ""
    for not_llama in ({"n_routed_experts": 256}, {"q_lora_rank": 1536}, {"num_experts": 128}):
        with pytest.raises(UnsupportedError, match="is not supported"):
            read_config(json.dumps({**qwen3_8b, "model_type": "something_new", **not_llama}))


def test_kimi_k2s_config_json_reads_as_deepseek_v3s_layout() -> None:
    """Kimi-K2 ships DeepSeek-V3's layout under model_type kimi_k2 (its config.json names DeepseekV3ForCausalLM)."""
    kimi = default_catalog().model("moonshotai/Kimi-K2-Instruct").architecture
    text = json.dumps({**hf_config(kimi).to_dict(), "model_type": "kimi_k2"})
    assert parameter_counts(architecture_from_config(text)).total == parameter_counts(kimi).total


@pytest.mark.parametrize("name", ["deepseek-ai/DeepSeek-V3", "zai-org/GLM-4.5-Air"])
def test_an_mlp_name_peft_maps_onto_the_routed_experts_is_refused_naming_the_attention(name: str) -> None:
    from planner.errors import UnsupportedError

    arch = default_catalog().model(name).architecture
    with pytest.raises(UnsupportedError, match=r"PEFT maps 'down_proj' .* adapt the attention \(.*o_proj"):
        lora_targets(arch, ("o_proj", "down_proj"), "training.lora.target_modules")
    assert {layer.name for layer in lora_targets(arch, ("all-linear",), "t")} & {"gate_proj", "down_proj"} == set()


def test_an_attention_transformers_lacks_for_the_family_is_refused_naming_the_field() -> None:
    from contract.schema import Attention, TrainingSpec
    from planner.convert import validate_against_model
    from planner.errors import UnsupportedError

    model = default_catalog().model("openai/gpt-oss-20b")
    validate_against_model(TrainingSpec(attention=Attention.EAGER), model)
    for attention in (Attention.SDPA, Attention.FLASH):
        with pytest.raises(UnsupportedError, match="set attention eager") as e:
            validate_against_model(TrainingSpec(attention=attention), model)
        assert e.value.field == "training.attention"
    # Gemma 2: no SDPA for its soft-capping either; flash-attention 2 has it
    gemma2 = default_catalog().model("google/gemma-2-2b")
    with pytest.raises(UnsupportedError, match="Gemma 2's attention soft-capping"):
        validate_against_model(TrainingSpec(attention=Attention.SDPA), gemma2)
    validate_against_model(TrainingSpec(attention=Attention.FLASH), gemma2)


def test_llama4_s_image_text_config_is_answered_for_its_language_model_with_a_note() -> None:
    """Llama 4's checkpoints are image-text models (model_type llama4) carrying the language model as text_config;
    the planner answers for that (Llama4ForCausalLM) and says the vision encoder is not planned."""
    from planner.hf_config import read_config

    scout = default_catalog().model("meta-llama/Llama-4-Scout-17B-16E").architecture
    text_config = hf_config(scout).to_dict()
    arch, note = read_config(json.dumps({"model_type": "llama4", "text_config": text_config,
                                         "vision_config": {"hidden_size": 1408}}))
    assert arch == scout and "vision encoder" in note and "Llama4ForCausalLM" in note
    assert read_config(json.dumps(text_config)) == (scout, "")
    # 17.17B of 107.77B parameters pass a token: one routed expert and the shared one
    counts = parameter_counts(scout)
    assert (counts.total, counts.active) == (107_769_861_120, 17_172_894_720)


@pytest.mark.parametrize(("change", "words"), [
    (dict(moe_layers=[0, 5]), "moe_layers"), (dict(no_rope_layers=[1, 0] * 24), "no_rope_layers"),
    (dict(attn_temperature_tuning=False), "attn_temperature_tuning"),
])
def test_a_llama4_config_off_its_released_patterns_is_refused_naming_the_key(change: dict, words: str) -> None:
    from planner.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match=words):
        architecture_from_config(json.dumps({"model_type": "llama4_text", **change}))


def test_what_of_llama4_is_not_modelled_is_refused_naming_the_field() -> None:
    from contract.schema import Attention, TrainingSpec
    from planner.convert import validate_against_model
    from planner.errors import UnsupportedError

    scout = default_catalog().model("meta-llama/Llama-4-Scout-17B-16E")
    validate_against_model(TrainingSpec(sequence_length=8191), scout)
    with pytest.raises(UnsupportedError, match="plan it with sdpa") as e:
        validate_against_model(TrainingSpec(attention=Attention.EAGER), scout)
    assert e.value.field == "training.attention"
    with pytest.raises(UnsupportedError, match="at most 8,191 tokens") as e:
        validate_against_model(TrainingSpec(sequence_length=8192), scout)
    assert e.value.field == "training.sequence_length"

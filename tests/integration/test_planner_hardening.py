"""Issue 9, planner items 1-5: every request a careless client or an attacker can send gets a short, clear
INVALID_ARGUMENT naming the field, over a real gRPC server, and the server keeps serving."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from tunefleet.v1 import hardware_pb2, model_pb2, planner_pb2, planner_pb2_grpc, training_pb2

from common.rpc import MAX_ERROR_CHARS
from contract.limits import MAX_RECOMMEND_LIMIT
from planner.catalog import default_catalog
from planner.parameters import parameter_split
from planner.search import Constraints, _hardware_options

pytestmark = pytest.mark.integration

UINT32_MAX, UINT64_MAX = 2 ** 32 - 1, 2 ** 64 - 1
LLAMA_CONFIG = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
                "max_position_embeddings": 4096}


def fit(**training: object) -> planner_pb2.FitRequest:
    return planner_pb2.FitRequest(model=model_pb2.ModelRef(catalog_name="Qwen/Qwen2.5-7B"),
                                  training=training_pb2.TrainingSpec(**training),
                                  hardware=hardware_pb2.HardwareSpec(gpu="a100-80gb"))


def estimate(**workload: object) -> planner_pb2.EstimateRequest:
    f = fit()
    return planner_pb2.EstimateRequest(model=f.model, training=f.training, hardware=f.hardware,
                                       workload=training_pb2.WorkloadSpec(**workload))


def recommend(**constraints: object) -> planner_pb2.RecommendRequest:
    return planner_pb2.RecommendRequest(model=model_pb2.ModelRef(catalog_name="Qwen/Qwen2.5-7B"),
                                        workload=training_pb2.WorkloadSpec(dataset_tokens=10_000_000),
                                        constraints=planner_pb2.Constraints(**constraints))


def with_config(config: dict[str, object] | str, **training: object) -> planner_pb2.FitRequest:
    request = fit(**training)
    request.model.config_json = config if isinstance(config, str) else json.dumps(config)
    return request


def edited(make: Callable[[], planner_pb2.FitRequest], edit: Callable[[planner_pb2.FitRequest], None]
           ) -> planner_pb2.FitRequest:
    request = make()
    edit(request)
    return request


def call(channel: grpc.Channel, request: object) -> grpc.RpcError:
    stub = planner_pb2_grpc.PlannerServiceStub(channel)
    method = {planner_pb2.FitRequest: stub.Fit, planner_pb2.EstimateRequest: stub.Estimate,
              planner_pb2.RecommendRequest: stub.Recommend}[type(request)]
    with pytest.raises(grpc.RpcError) as info:
        method(request, timeout=30)
    return info.value


def violation(error: grpc.RpcError) -> error_details_pb2.BadRequest.FieldViolation:
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert len(error.details()) <= MAX_ERROR_CHARS + 100
    status = rpc_status.from_call(error)
    assert status is not None
    bad = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad)
    return bad.field_violations[0]


def _big_config(key: str, value: object) -> dict[str, object]:
    return {**LLAMA_CONFIG, key: value}


NUMBERS = [  # item 3: each used to overflow a result field (INTERNAL) or slip through a `<= 0` check
    ("training.micro_batch_size", fit(micro_batch_size=UINT32_MAX)),
    ("training.sequence_length", fit(sequence_length=UINT32_MAX)),
    ("hardware.gpu_memory_bytes", edited(fit, lambda r: setattr(r.hardware, "gpu_memory_bytes", UINT64_MAX))),
    ("hardware.gpus_per_node", edited(fit, lambda r: setattr(r.hardware, "gpus_per_node", UINT32_MAX))),
    ("hardware.hourly_usd_per_gpu", edited(fit, lambda r: setattr(r.hardware, "hourly_usd_per_gpu", math.nan))),
    ("hardware.host_memory_bytes", edited(fit, lambda r: setattr(r.hardware, "host_memory_bytes", UINT64_MAX))),
    ("workload.max_steps", estimate(max_steps=UINT64_MAX)),
    ("workload.dataset_tokens", estimate(dataset_tokens=UINT64_MAX)),
    ("workload.epochs", estimate(dataset_tokens=1000, epochs=math.nan)),
    ("workload.epochs", estimate(dataset_tokens=1000, epochs=math.inf)),
    ("training.lora.alpha", fit(lora=training_pb2.LoraSpec(alpha=math.nan))),
    ("training.lora.dropout", fit(lora=training_pb2.LoraSpec(dropout=-math.inf))),
    ("constraints.max_cost_usd", recommend(max_cost_usd=math.nan)),
    ("constraints.max_duration_s", recommend(max_duration_s=math.inf)),
    ("limit", edited(recommend, lambda r: setattr(r, "limit", MAX_RECOMMEND_LIMIT + 1))),  # type: ignore[arg-type]
    ("model.architecture.vocab_size", edited(fit, lambda r: r.model.architecture.CopyFrom(model_pb2.Architecture(
        family=model_pb2.MODEL_FAMILY_LLAMA, num_layers=2, hidden_size=64, intermediate_size=64,
        num_attention_heads=4, num_key_value_heads=4, vocab_size=4_000_000_000)))),
    ("training.micro_batch_size", fit(micro_batch_size=4096, sequence_length=2 ** 20)),  # 2^32 tokens at once
    ("training.sequence_length", with_config(LLAMA_CONFIG, sequence_length=8192)),  # past the model's context
    ("model.config_json", with_config(_big_config("num_local_experts", 10 ** 9))),
    ("model.config_json", with_config(_big_config("head_dim", -128))),
    ("model.config_json", with_config(_big_config("vocab_size", 10 ** 12))),
]


@pytest.mark.parametrize(("field", "request_"), NUMBERS, ids=[f"{i}-{f}" for i, (f, _) in enumerate(NUMBERS)])
def test_numbers_out_of_range_are_invalid_argument_naming_the_field(channel: grpc.Channel, field: str,
                                                                    request_: object) -> None:
    v = violation(call(channel, request_))
    assert v.field == field, v.description


CONFIGS = [  # item 4: each used to raise inside the parser (INTERNAL)
    ("[" * 5000 + "]" * 5000, "nests deeper"),
    ('{"model_type": "llama", "num_hidden_layers": ' + "9" * 5000 + "}", "digits"),
    (_big_config("num_key_value_heads", "abc"), "'num_key_value_heads' must be an integer"),
    (_big_config("num_key_value_heads", [1]), "'num_key_value_heads' must be an integer"),
    (json.dumps(LLAMA_CONFIG)[:-1] + ', "hidden_size": 1e400}', "'hidden_size' must be an integer"),
    (json.dumps(LLAMA_CONFIG)[:-1] + ', "rope_theta": NaN}', "NaN"),
    ({**LLAMA_CONFIG, "model_type": "qwen2_vl", "text_config": [1]}, "'text_config' must be a JSON object"),
    ({"model_type": ["llama"]}, "model_type ['llama'] is not supported"),
    (_big_config("attention_bias", "yes"), "'attention_bias' must be true or false"),
]


@pytest.mark.parametrize(("config", "words"), CONFIGS, ids=[w for _, w in CONFIGS])
def test_malformed_config_json_is_invalid_argument_naming_the_key(channel: grpc.Channel, config: object,
                                                                 words: str) -> None:
    v = violation(call(channel, with_config(config)))  # type: ignore[arg-type]
    assert v.field == "model.config_json"
    assert words in v.description


def test_a_vision_config_with_null_optional_keys_takes_their_defaults(channel: grpc.Channel) -> None:
    config = {**LLAMA_CONFIG, "model_type": "qwen2_vl", "vision_config": {
        "depth": 2, "embed_dim": 32, "num_heads": 4, "patch_size": 14, "mlp_ratio": None, "hidden_size": 64}}
    answer = planner_pb2_grpc.PlannerServiceStub(channel).Fit(with_config(config, sequence_length=1024), timeout=30)
    assert answer.result.model.architecture.vision.mlp_ratio == 4


@pytest.mark.parametrize("field", ["hardware.gpu", "hardware.flavor", "model.catalog_name",
                                   "training.lora.target_modules[0]"])
def test_huge_echoed_strings_are_refused_short_and_by_name(channel: grpc.Channel, field: str) -> None:
    """Item 5: a 1 MB name came back whole (RESOURCE_EXHAUSTED on the client) and went whole into the log."""
    huge = "x" * 1_000_000
    request = fit()
    if field == "hardware.gpu":
        request.hardware.gpu = huge
    elif field == "hardware.flavor":
        request.hardware.flavor = huge
    elif field == "model.catalog_name":
        request.model.catalog_name = huge
    else:
        request.training.lora.target_modules.append(huge)
    v = violation(call(channel, request))
    assert v.field == field and len(v.description) < 300 and "1,000,000 characters" in v.description


def test_unknown_names_are_echoed_truncated(channel: grpc.Channel) -> None:
    v = violation(call(channel, edited(fit, lambda r: setattr(r.hardware, "gpu", "g" * 250))))
    assert v.field == "hardware.gpu" and "250 characters" in v.description and "g" * 100 not in v.description


def test_all_linear_with_other_modules_says_to_give_it_alone(channel: grpc.Channel) -> None:
    v = violation(call(channel, fit(lora=training_pb2.LoraSpec(target_modules=["all-linear", "q_proj"]))))
    assert v.field == "training.lora.target_modules" and "give it alone" in v.description


def test_repeated_list_entries_are_searched_once_and_long_lists_refused(channel: grpc.Channel) -> None:
    """Item 1: each repeat of a method re-ran the whole search (100 repeats: 38 s)."""
    stub = planner_pb2_grpc.PlannerServiceStub(channel)
    once = stub.Recommend(recommend(allowed_methods=[training_pb2.METHOD_LORA]), timeout=60)
    repeated = stub.Recommend(recommend(allowed_methods=[training_pb2.METHOD_LORA] * 8,
                                        allowed_gpus=["a100-80gb", "A100 80GB", "nvidia-a100-80gb"]), timeout=60)
    pinned = stub.Recommend(recommend(allowed_methods=[training_pb2.METHOD_LORA], allowed_gpus=["a100-80gb"]),
                            timeout=60)
    assert once.evaluated_count > pinned.evaluated_count == repeated.evaluated_count > 0
    v = violation(call(channel, recommend(allowed_methods=[training_pb2.METHOD_LORA] * 9)))
    assert v.field == "constraints.allowed_methods" and "9 entries" in v.description
    v = violation(call(channel, recommend(allowed_gpus=["a100-80gb"] * 65)))
    assert v.field == "constraints.allowed_gpus"
    v = violation(call(channel, fit(lora=training_pb2.LoraSpec(target_modules=["q_proj"] * 33))))
    assert v.field == "training.lora.target_modules"


def test_the_largest_recommend_answer_is_bounded_and_covers_the_catalog(channel: grpc.Channel) -> None:
    """Item 2: one Recommend with limit=1000 built a 429 MB answer."""
    assert len(_hardware_options(default_catalog(), Constraints(max_gpus=8))) <= MAX_RECOMMEND_LIMIT
    request = recommend()
    request.limit = MAX_RECOMMEND_LIMIT
    request.training.lora.target_modules.extend(["q_proj", "k_proj", "v_proj", "o_proj"])
    answer = planner_pb2_grpc.PlannerServiceStub(channel).Recommend(request, timeout=60)
    assert answer.candidates and answer.ByteSize() < 4 * 1024 * 1024


def test_caches_hold_a_bounded_number_of_small_keys(channel: grpc.Channel) -> None:
    """Item 2: 60 distinct 3 MB target-module lists grew the server from 346 MB to 1.3 GB."""
    stub = planner_pb2_grpc.PlannerServiceStub(channel)
    for i in range(40):  # distinct valid requests: each a new cache key, each key a few short names
        stub.Fit(fit(lora=training_pb2.LoraSpec(rank=8 + i, target_modules=["q_proj", "v_proj"])), timeout=30)
    info = parameter_split.cache_info()
    assert info.maxsize is not None and info.maxsize <= 512 and info.currsize <= info.maxsize

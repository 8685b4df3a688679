"""The planner over real gRPC on loopback: round trips, errors with field violations, health,
reflection, auth and graceful shutdown."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status
from tunefleet.v1 import hardware_pb2, model_pb2, planner_pb2, planner_pb2_grpc, training_pb2

from clients.errors import InvalidArgument, Unauthenticated
from clients.planner_client import PlannerClient
from common.rpc import shutdown
from contract.limits import MAX_RECOMMEND_LIMIT
from planner.server import create_server
from tests.conftest import TOKEN

pytestmark = pytest.mark.integration


def fit_request(**training: object) -> planner_pb2.FitRequest:
    return planner_pb2.FitRequest(model=model_pb2.ModelRef(catalog_name="meta-llama/Llama-3.1-8B"),
                                  training=training_pb2.TrainingSpec(method=training_pb2.METHOD_QLORA, **training),
                                  hardware=hardware_pb2.HardwareSpec(gpu="rtx-4090"))


def test_fit_over_grpc_equals_in_process(planner_address: str) -> None:
    remote = PlannerClient(planner_address).fit(fit_request(micro_batch_size=2))
    local = PlannerClient().fit(fit_request(micro_batch_size=2))
    assert remote == local
    assert remote.result.fits and remote.result.per_gpu.total_bytes > 0


def bad_requests() -> list[tuple[str, planner_pb2.FitRequest]]:
    base = fit_request()
    unknown_gpu = planner_pb2.FitRequest()
    unknown_gpu.CopyFrom(base)
    unknown_gpu.hardware.gpu = "rtx-9999"
    unknown_model = planner_pb2.FitRequest()
    unknown_model.CopyFrom(base)
    unknown_model.model.catalog_name = "meta-llama/Llama-3.2-7B"
    bad_json = planner_pb2.FitRequest()
    bad_json.CopyFrom(base)
    bad_json.model.config_json = '{"model_type": "llama", '
    big_rank = fit_request(lora=training_pb2.LoraSpec(rank=8192))
    zero5 = fit_request(zero_stage=5)
    tpu = planner_pb2.FitRequest()
    tpu.CopyFrom(base)
    tpu.hardware.gpu = ""
    tpu.hardware.flavor = "v5e-1x1"
    neg_memory = planner_pb2.FitRequest()
    neg_memory.CopyFrom(base)
    neg_memory.hardware.hourly_usd_per_gpu = -1.0
    bad_target = fit_request(lora=training_pb2.LoraSpec(rank=8, target_modules=["c_attn"]))
    return [("hardware.gpu", unknown_gpu), ("model.catalog_name", unknown_model), ("model.config_json", bad_json),
            ("training.lora.rank", big_rank), ("training.zero_stage", zero5), ("hardware.flavor", tpu),
            ("hardware.hourly_usd_per_gpu", neg_memory), ("training.lora.target_modules", bad_target)]


@pytest.mark.parametrize(("field", "request_"), bad_requests(), ids=[f for f, _ in bad_requests()])
def test_bad_request_is_invalid_argument_naming_the_field(channel: grpc.Channel, field: str,
                                                          request_: planner_pb2.FitRequest) -> None:
    stub = planner_pb2_grpc.PlannerServiceStub(channel)
    with pytest.raises(grpc.RpcError) as info:
        stub.Fit(request_, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(info.value)
    assert status is not None
    bad = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad)
    assert bad.field_violations[0].field == field
    assert bad.field_violations[0].description
    # the server keeps serving after every bad request
    assert stub.Fit(fit_request(), timeout=10).result.per_gpu.total_bytes > 0


def test_typed_client_error_carries_the_violation(planner_address: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        PlannerClient(planner_address).fit(fit_request(micro_batch_size=0, sequence_length=0, zero_stage=7))
    assert info.value.violations[0].field == "training.zero_stage"


def test_health_and_reflection(channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    response = health.Check(health_pb2.HealthCheckRequest(service="tunefleet.v1.PlannerService"), timeout=5)
    assert response.status == health_pb2.HealthCheckResponse.SERVING
    reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
    answers = reflect.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                           timeout=5)
    names = {s.name for a in answers for s in a.list_services_response.service}
    assert "tunefleet.v1.PlannerService" in names


def test_bearer_token_is_required_when_configured(authed_planner: str) -> None:
    with pytest.raises(Unauthenticated):
        PlannerClient(authed_planner).list_models()
    with pytest.raises(Unauthenticated):
        PlannerClient(authed_planner, token="wrong").list_models()
    assert PlannerClient(authed_planner, token=TOKEN).list_models().models


def test_recommend_returns_an_executable_plan_within_budget(planner_address: str) -> None:
    client = PlannerClient(planner_address)
    request = planner_pb2.RecommendRequest(
        model=model_pb2.ModelRef(catalog_name="Qwen/Qwen2.5-7B"),
        training=training_pb2.TrainingSpec(method=training_pb2.METHOD_LORA, micro_batch_size=4),
        workload=training_pb2.WorkloadSpec(dataset_tokens=20_000_000), limit=MAX_RECOMMEND_LIMIT,
        constraints=planner_pb2.Constraints(allow_tight=True))  # ranked by cost alone, tight or not
    unconstrained = client.recommend(request)
    budget = unconstrained.candidates[2].estimate.cost_usd
    request.constraints.max_cost_usd = budget
    response = client.recommend(request)
    costs = [c.estimate.cost_usd for c in response.candidates]
    assert len(costs) == 3 and costs == sorted(costs) and costs[-1] <= budget
    assert all(c.fit.fits for c in response.candidates)
    assert response.plan.plan_id and response.plan.deepspeed_config_json
    assert response.plan.prediction.fit.per_gpu.total_bytes == response.candidates[0].fit.per_gpu.total_bytes
    assert sum(r.reason == planner_pb2.REJECTION_REASON_OVER_BUDGET for r in response.rejections) == \
        len(unconstrained.candidates) - 3


def test_graceful_shutdown_stops_serving() -> None:
    server, port, health_servicer = create_server("127.0.0.1:0")
    server.start()
    client = PlannerClient(f"127.0.0.1:{port}", timeout_s=5)
    assert client.list_hardware().gpus
    shutdown(server, health_servicer, 1.0)
    from clients.errors import Unavailable
    with pytest.raises(Unavailable):
        client.list_hardware()

"""The planner's use cases over protobuf messages: one domain call per RPC. No gRPC here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from google.protobuf import timestamp_pb2
from tunefleet.v1 import hardware_pb2, model_pb2, plan_pb2, planner_pb2, training_pb2

from contract import training as training_spec
from contract.errors import InvalidFieldError
from contract.model import ModelSpec
from contract.schema import Hardware, Precision, TrainingSpec
from planner import convert
from planner.catalog import Catalog
from planner.errors import NotFoundError
from planner.estimate import calibrated, estimate
from planner.fit import FitResult, fit
from planner.inference import InferenceSpec, inference_fit
from planner.memo import memo
from planner.plan import build_plan
from planner.search import half_precision, recommend

DEFAULT_RECOMMEND_LIMIT = 10
# Fit answers kept, as protos (~1-2 KB each with their notes and band): at most ~8 MB. A key is the resolved model,
# training and hardware specs (frozen, bounded by contract.limits) and two numbers, never request bytes.
FIT_ANSWER_ENTRIES = 4096


def _auto(precision: int) -> int:
    """The only thing the answer needs of the request's precision: whether the planner chose it (a note says so)."""
    return training_pb2.PRECISION_UNSPECIFIED if precision == training_pb2.PRECISION_UNSPECIFIED else -1


class Planner:
    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def _resolve(self, model: model_pb2.ModelRef, training: training_pb2.TrainingSpec,
                 hardware: hardware_pb2.HardwareSpec) -> tuple[ModelSpec, TrainingSpec, Hardware]:
        m = convert.model_from_proto(model, self.catalog)
        hw = convert.hardware_from_proto(hardware, self.catalog)
        t = training_spec.training_from_proto(training, hw.world_size, default_precision=half_precision(hw.gpu))
        convert.validate_against_model(t, m)
        return m, t, hw

    def _fit(self, m: ModelSpec, t: TrainingSpec, hw: Hardware, precision: int, margin_fraction: float) -> FitResult:
        result = fit(m, t, hw, self.catalog, margin_fraction)
        if precision == training_pb2.PRECISION_UNSPECIFIED and t.precision is Precision.FP16:
            result = replace(result, notes=(f"{hw.gpu.display_name} has no bf16: planned fp16 mixed precision "
                                            "(loss scaling)", *result.notes))
        return result

    @memo(FIT_ANSWER_ENTRIES)
    def _fit_answer(self, m: ModelSpec, t: TrainingSpec, hw: Hardware, precision: int,
                    margin_fraction: float) -> plan_pb2.FitResult:
        """A Fit's answer as the proto it is sent as: computed and converted once per question, then reused (the
        caller copies it into its response)."""
        return convert.fit_to_proto(self._fit(m, t, hw, precision, margin_fraction))

    def fit(self, request: planner_pb2.FitRequest) -> planner_pb2.FitResponse:
        m, t, hw = self._resolve(request.model, request.training, request.hardware)
        if request.HasField("inference"):
            spec = InferenceSpec(request.inference.batch_size, request.inference.context_tokens)
            return planner_pb2.FitResponse(result=convert.fit_to_proto(
                inference_fit(m, t, hw, self.catalog, spec, request.margin_fraction)))
        return planner_pb2.FitResponse(result=self._fit_answer(m, t, hw, _auto(request.training.precision),
                                                               request.margin_fraction))

    def estimate(self, request: planner_pb2.EstimateRequest) -> planner_pb2.EstimateResponse:
        m, t, hw = self._resolve(request.model, request.training, request.hardware)
        workload = convert.workload_from_proto(request.workload)
        return planner_pb2.EstimateResponse(
            fit=self._fit_answer(m, t, hw, _auto(request.training.precision), request.margin_fraction),
            estimate=convert.estimate_to_proto(calibrated(estimate(m, t, hw, workload),
                                                          self.catalog.calibration(hw.gpu.name))))

    def recommend(self, request: planner_pb2.RecommendRequest,
                  should_stop: Callable[[], bool] = lambda: False) -> planner_pb2.RecommendResponse:
        m = convert.model_from_proto(request.model, self.catalog)
        t = training_spec.training_from_proto(request.training, 1)
        convert.validate_against_model(t, m)
        workload = convert.workload_from_proto(request.workload)
        constraints = convert.constraints_from_proto(request.constraints, self.catalog)
        result = recommend(m, t, workload, constraints, self.catalog, request.limit or DEFAULT_RECOMMEND_LIMIT,
                           should_stop,
                           auto_precision=request.training.precision == training_pb2.PRECISION_UNSPECIFIED)
        response = convert.recommendation_to_proto(result)
        if result.candidates:
            best = result.candidates[0]
            now = timestamp_pb2.Timestamp()
            now.GetCurrentTime()
            dataset = request.dataset if request.HasField("dataset") else plan_pb2.DatasetRef()
            response.plan.CopyFrom(build_plan(request.model, best.fit, best.estimate, request.workload, dataset, now))
        return response

    def list_hardware(self, request: planner_pb2.ListHardwareRequest) -> planner_pb2.ListHardwareResponse:
        flavors = [f for f in self.catalog.flavors if not request.provider or f.provider == request.provider]
        if request.provider and not flavors:
            providers = sorted({f.provider for f in self.catalog.flavors})
            raise NotFoundError("provider", f"no flavors from '{request.provider}'; known: {', '.join(providers)}")
        return planner_pb2.ListHardwareResponse(gpus=[convert.gpu_to_proto(g) for g in self.catalog.gpus],
                                                flavors=[convert.flavor_to_proto(f) for f in flavors])

    def list_models(self, request: planner_pb2.ListModelsRequest) -> planner_pb2.ListModelsResponse:
        if request.family and request.family not in convert.FAMILY.values():
            raise InvalidFieldError("family", f"unknown model family {request.family}")
        models = [m for m in self.catalog.models
                  if not request.family or convert.FAMILY[m.architecture.family] == request.family]
        return planner_pb2.ListModelsResponse(models=[convert.model_info_to_proto(m) for m in models])

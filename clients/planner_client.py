"""Typed Python client of the PlannerService: over gRPC, or in-process when no address is given."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
from tunefleet.v1 import planner_pb2, planner_pb2_grpc

from clients.connection import Connection, channel_for, metadata
from clients.errors import from_domain_error, from_rpc_error
from contract.errors import SpecError

R = TypeVar("R")
DEFAULT_TIMEOUT_S = 30.0


class PlannerClient:
    """`PlannerClient("host:port")` talks gRPC; `PlannerClient()` plans in this process. Given `channel` (shared by a
    server's many callers), it calls over it with its own token and leaves it open on close()."""

    def __init__(self, address: str | None = None, *, token: str = "", tls_ca: bytes | None = None,
                 tls_server_name: str = "", timeout_s: float = DEFAULT_TIMEOUT_S,
                 calibration: Path | None = None, channel: grpc.Channel | None = None) -> None:
        connection = Connection(token, tls_ca, tls_server_name)
        self._timeout_s = timeout_s
        self._metadata = metadata(connection)
        self._channel: grpc.Channel | None = None
        self._owns_channel = channel is None
        if address:
            self._channel = channel or channel_for(address, connection)
            self._stub: Any = planner_pb2_grpc.PlannerServiceStub(self._channel)
            self._local: Any = None
        else:
            from planner.catalog import calibrated_catalog
            from planner.service import Planner
            self._local = Planner(calibrated_catalog(calibration))

    def close(self) -> None:
        if self._channel is not None and self._owns_channel:
            self._channel.close()

    def __enter__(self) -> PlannerClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, rpc: str, local: str, request: Any) -> Any:
        if self._local is not None:
            fn: Callable[[Any], Any] = getattr(self._local, local)
            try:
                return fn(request)
            except SpecError as exc:
                raise from_domain_error(exc) from exc
        try:
            return getattr(self._stub, rpc)(request, timeout=self._timeout_s, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc

    def fit(self, request: planner_pb2.FitRequest) -> planner_pb2.FitResponse:
        return self._call("Fit", "fit", request)

    def estimate(self, request: planner_pb2.EstimateRequest) -> planner_pb2.EstimateResponse:
        return self._call("Estimate", "estimate", request)

    def recommend(self, request: planner_pb2.RecommendRequest) -> planner_pb2.RecommendResponse:
        return self._call("Recommend", "recommend", request)

    def list_hardware(self, request: planner_pb2.ListHardwareRequest | None = None) -> planner_pb2.ListHardwareResponse:
        return self._call("ListHardware", "list_hardware",
                          request or planner_pb2.ListHardwareRequest())

    def list_models(self, request: planner_pb2.ListModelsRequest | None = None) -> planner_pb2.ListModelsResponse:
        return self._call("ListModels", "list_models",
                          request or planner_pb2.ListModelsRequest())

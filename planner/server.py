"""The planner's gRPC server: a thin adapter from PlannerService to the domain."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health
from tunefleet.v1 import planner_pb2, planner_pb2_grpc

from common.admission import caller_gone
from common.rpc import ServerOptions, build_server, call_unary
from contract.limits import REQUEST_BOUNDS
from planner.catalog import Catalog, default_catalog
from planner.service import Planner

# Calls admitted one at a time per process (common.admission): searches (milliseconds to a second each), so that
# Fits never wait behind them and a caller that left stops its search. Fit and Estimate (tens of microseconds,
# answered from planner.memo) run as they arrive, bounded by the calls in flight: a compute slot for them cost a
# thread handoff per call (200 Fit clients on 2 processes: 2,217/s with a slot, 2,542/s without; make bench).
EXPENSIVE = {"Recommend": "search"}
SERVICE_NAME = planner_pb2.DESCRIPTOR.services_by_name["PlannerService"].full_name


class PlannerServicer(planner_pb2_grpc.PlannerServiceServicer):
    def __init__(self, planner: Planner) -> None:
        self._planner = planner

    def Fit(self, request, context):  # noqa: N802
        return call_unary(self._planner.fit, request, context)

    def Estimate(self, request, context):  # noqa: N802
        return call_unary(self._planner.estimate, request, context)

    def Recommend(self, request, context):  # noqa: N802
        return call_unary(lambda r: self._planner.recommend(r, should_stop=caller_gone(context)), request, context)

    def ListHardware(self, request, context):  # noqa: N802
        return call_unary(self._planner.list_hardware, request, context)

    def ListModels(self, request, context):  # noqa: N802
        return call_unary(self._planner.list_models, request, context)


def create_server(address: str = "127.0.0.1:0", catalog: Catalog | None = None,
                  options: ServerOptions | None = None,
                  planner: Planner | None = None) -> tuple[grpc.Server, int, health.HealthServicer]:
    """A ready (not yet started) planner server bound to `address`; port 0 picks a free port."""
    servicer = PlannerServicer(planner or Planner(catalog or default_catalog()))
    return build_server(address, lambda s: planner_pb2_grpc.add_PlannerServiceServicer_to_server(servicer, s),
                        [SERVICE_NAME], options or ServerOptions(), REQUEST_BOUNDS, EXPENSIVE)

"""The executor's gRPC server: a thin adapter from ExecutorService to executor.service."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import redis
from grpc_health.v1 import health
from tunefleet.v1 import executor_pb2, executor_pb2_grpc

from common.rpc import ServerOptions, build_server, call_stream, call_unary
from executor.metrics import EVENTS_STREAMED, register_fleet_collector
from executor.service import Executor, ExecutorConfig
from planner.catalog import default_catalog

SERVICE_NAME = executor_pb2.DESCRIPTOR.services_by_name["ExecutorService"].full_name
# Each Watch holds a server thread while it streams: size the pool for the watchers one service carries.
DEFAULT_WORKERS = 256
MAX_CONCURRENT_RPCS = 512


class ExecutorServicer(executor_pb2_grpc.ExecutorServiceServicer):
    def __init__(self, executor: Executor) -> None:
        self._executor = executor

    def Submit(self, request, context):  # noqa: N802
        return call_unary(self._executor.submit, request, context)

    def Get(self, request, context):  # noqa: N802
        return call_unary(self._executor.get, request, context)

    def List(self, request, context):  # noqa: N802
        return call_unary(self._executor.list_jobs, request, context)

    def Cancel(self, request, context):  # noqa: N802
        return call_unary(self._executor.cancel, request, context)

    def Fleet(self, request, context):  # noqa: N802
        return call_unary(self._executor.fleet, request, context)

    def Watch(self, request, context):  # noqa: N802
        def responses(r: executor_pb2.WatchRequest) -> Iterator[executor_pb2.WatchResponse]:
            for response in self._executor.watch(r, is_active=context.is_active):
                if response.HasField("event"):
                    EVENTS_STREAMED.inc()
                yield response
        return call_stream(responses, request, context)


def connect(redis_url: str, config: ExecutorConfig | None = None) -> Executor:
    """The executor over the fleet's Redis; close() it after the server stops."""
    return Executor(redis.Redis.from_url(redis_url, health_check_interval=30), default_catalog(), config)


def create_server(address: str, executor: Executor,
                  options: ServerOptions | None = None) -> tuple[grpc.Server, int, health.HealthServicer]:
    """A ready (not yet started) executor server bound to `address` (port 0 picks a free port)."""
    register_fleet_collector(executor)
    servicer = ExecutorServicer(executor)
    server, port, health_servicer = build_server(
        address, lambda s: executor_pb2_grpc.add_ExecutorServiceServicer_to_server(servicer, s), [SERVICE_NAME],
        options or ServerOptions(max_workers=DEFAULT_WORKERS, max_concurrent_rpcs=MAX_CONCURRENT_RPCS))
    return server, port, health_servicer

"""The executor's gRPC server: a thin adapter from ExecutorService to executor.service.servicer."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import redis
from grpc_health.v1 import health
from tunefleet.v1 import executor_pb2, executor_pb2_grpc

from common.bounds import Bounds
from common.rpc import ServerOptions, build_server, call_stream, call_unary
from contract.limits import PLAN_BOUNDS
from executor.service.metrics import EVENTS_STREAMED, register_fleet_collector
from executor.service.servicer import Executor, ExecutorConfig
from fleet import connection
from fleet.errors import FleetUnavailableError
from planner.catalog import default_catalog

# Every executor request: the plan inside Submit has a plan file's bounds; a cancel reason is kept (cut) anyway.
REQUEST_BOUNDS = PLAN_BOUNDS.prefixed("plan.").merged(Bounds(string_chars={"reason": 4096, "page_token": 1024}))
SERVICE_NAME = executor_pb2.DESCRIPTOR.services_by_name["ExecutorService"].full_name
# Each Watch holds a server thread while it streams: size the pool for the watchers one service carries.
DEFAULT_WORKERS = 256
MAX_CONCURRENT_RPCS = 512


def _redis_reachable(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A call that meets an unreachable Redis (past the client's retries) answers UNAVAILABLE, not INTERNAL."""
    def call(request: Any) -> Any:
        try:
            return fn(request)
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise FleetUnavailableError(f"the fleet's Redis is unreachable ({e}); retry shortly") from e
    return call


class ExecutorServicer(executor_pb2_grpc.ExecutorServiceServicer):
    def __init__(self, executor: Executor) -> None:
        self._executor = executor

    def Submit(self, request, context):  # noqa: N802
        return call_unary(_redis_reachable(self._executor.submit), request, context)

    def Get(self, request, context):  # noqa: N802
        return call_unary(_redis_reachable(self._executor.get), request, context)

    def List(self, request, context):  # noqa: N802
        return call_unary(_redis_reachable(self._executor.list_jobs), request, context)

    def Cancel(self, request, context):  # noqa: N802
        return call_unary(_redis_reachable(self._executor.cancel), request, context)

    def Fleet(self, request, context):  # noqa: N802
        return call_unary(_redis_reachable(self._executor.fleet), request, context)

    def Watch(self, request, context):  # noqa: N802
        def responses(r: executor_pb2.WatchRequest) -> Iterator[executor_pb2.WatchResponse]:
            try:
                for response in self._executor.watch(r, is_active=context.is_active):
                    if response.HasField("event"):
                        EVENTS_STREAMED.inc()
                    yield response
            except (redis.ConnectionError, redis.TimeoutError) as e:
                raise FleetUnavailableError(f"the fleet's Redis is unreachable ({e}); watch again with "
                                            "after_sequence = the last sequence received") from e
        return call_stream(responses, request, context)


def connect(redis_url: str, config: ExecutorConfig | None = None) -> Executor:
    """The executor over the fleet's Redis (reconnecting on its own across a Redis restart), sweeping the fleet
    in the background; close() it after the server stops."""
    executor = Executor(connection.connect(redis_url), default_catalog(), config)
    executor.start_sweeping()
    return executor


def create_server(address: str, executor: Executor,
                  options: ServerOptions | None = None) -> tuple[grpc.Server, int, health.HealthServicer]:
    """A ready (not yet started) executor server bound to `address` (port 0 picks a free port)."""
    register_fleet_collector(executor)
    servicer = ExecutorServicer(executor)
    server, port, health_servicer = build_server(
        address, lambda s: executor_pb2_grpc.add_ExecutorServiceServicer_to_server(servicer, s), [SERVICE_NAME],
        options or ServerOptions(max_workers=DEFAULT_WORKERS, max_concurrent_rpcs=MAX_CONCURRENT_RPCS),
        REQUEST_BOUNDS)
    return server, port, health_servicer

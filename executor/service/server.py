"""The executor's gRPC server: a thin adapter from ExecutorService to executor.service.servicer."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

import grpc
import redis
import structlog
from grpc_health.v1 import health, health_pb2
from tunefleet.v1 import executor_pb2, executor_pb2_grpc

from common.admission import OwnerLimits
from common.auth import caller
from common.bounds import Bounds
from common.errors import DeniedError, PreconditionError, QuotaError
from common.identity import Identities, Identity, Role
from common.rpc import ServerOptions, build_server, call_stream, call_unary
from contract.limits import PLAN_BOUNDS
from executor.service.metrics import EVENTS_STREAMED, register_fleet_collector
from executor.service.servicer import Executor, ExecutorConfig
from fleet import connection, durability
from fleet.durability import NotReplicatedError
from fleet.errors import FleetUnavailableError
from planner.catalog import default_catalog

log = structlog.get_logger("executor.service.server")
# Every executor request: the plan inside Submit has a plan file's bounds; a cancel reason is kept (cut) anyway.
REQUEST_BOUNDS = PLAN_BOUNDS.prefixed("plan.").merged(Bounds(string_chars={"reason": 4096, "page_token": 1024}))
SERVICE_NAME = executor_pb2.DESCRIPTOR.services_by_name["ExecutorService"].full_name
# Each Watch holds a server thread while it streams: size the pool for the watchers one service carries.
DEFAULT_WORKERS = 256
MAX_CONCURRENT_RPCS = 512
# How often an open Watch checks that its caller's token is still in the identities file: a revoked token's stream
# ends with UNAUTHENTICATED within this (or the heartbeat interval, whichever is longer).
IDENTITY_RECHECK_S = 5.0


def _redis_reachable(executor: Executor, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A call answers UNAVAILABLE, not INTERNAL, when Redis is unreachable: at once while the service's probe
    says so, else after the client's retries."""
    def call(request: Any) -> Any:
        if not executor.reachability.up:
            raise FleetUnavailableError("the fleet's Redis is unreachable; retry shortly")
        try:
            return fn(request)
        except NotReplicatedError as e:
            raise FleetUnavailableError(str(e)) from e
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise FleetUnavailableError(f"the fleet's Redis is unreachable ({e}); retry shortly") from e
    return call


# Who a call without a known token is, in the audit log.
NO_CALLER = Identity("(unauthenticated)", "-", Role.VIEWER)
# What a caller is refused for (not a bad request): the audit log keeps these attempts.
REFUSALS = (DeniedError, PreconditionError, QuotaError)


def _target(request: Any) -> str:
    """What a refused call aimed at: its job (or plan) id, or host."""
    if isinstance(request, executor_pb2.SubmitRequest):
        return request.plan.plan_id
    return str(getattr(request, "job_id", "") or getattr(request, "host_id", ""))


class ExecutorServicer(executor_pb2_grpc.ExecutorServiceServicer):
    def __init__(self, executor: Executor, identities: Identities | None) -> None:
        self._executor = executor
        self._identities = identities
        config = executor.config
        self._watches = OwnerLimits(config.max_watches_per_caller, config.max_watches_per_team)

    def _call(self, fn: Callable[[Any, Identity], Any], request: Any, context: grpc.ServicerContext,
              audited: str = "") -> Any:
        """One use case, called with the caller's identity; an `audited` action's refusals (a role too low, a
        budget, a quota) go to the audit log with their reason."""
        def with_caller(r: Any) -> Any:
            who = caller(self._identities, context.invocation_metadata())
            try:
                answer = fn(r, who)
            except REFUSALS as e:
                if audited and self._executor.audit_log.record_denied(who, audited, _target(r), str(e)):
                    durability.confirm(self._executor.connection, f"audit of a refused {audited}")
                raise
            if audited:  # a call that writes answers once a replica holds what it wrote (fleet.durability)
                durability.confirm(self._executor.connection, audited)
            return answer
        return call_unary(_redis_reachable(self._executor, with_caller), request, context)

    def Submit(self, request, context):  # noqa: N802
        return self._call(self._executor.submit, request, context, "submit")

    def Get(self, request, context):  # noqa: N802
        return self._call(self._executor.get, request, context)

    def List(self, request, context):  # noqa: N802
        return self._call(self._executor.list_jobs, request, context)

    def Cancel(self, request, context):  # noqa: N802
        return self._call(self._executor.cancel, request, context, "cancel")

    def Fleet(self, request, context):  # noqa: N802
        return self._call(self._executor.fleet, request, context)

    def ClearHost(self, request, context):  # noqa: N802
        return self._call(self._executor.clear_host, request, context, "clear-host")

    def Audit(self, request, context):  # noqa: N802
        return self._call(self._executor.audit, request, context)

    def Usage(self, request, context):  # noqa: N802
        return self._call(self._executor.usage, request, context)

    def Move(self, request, context):  # noqa: N802
        return self._call(self._executor.move, request, context, "move")

    def WhoAmI(self, request, context):  # noqa: N802
        def who(_: executor_pb2.WhoAmIRequest) -> executor_pb2.WhoAmIResponse:
            identity = caller(self._identities, context.invocation_metadata())
            return executor_pb2.WhoAmIResponse(principal=identity.principal, team=identity.team,
                                               role=identity.role.value)
        return call_unary(who, request, context)

    def Watch(self, request, context):  # noqa: N802
        def responses(r: executor_pb2.WatchRequest) -> Iterator[executor_pb2.WatchResponse]:
            if not self._executor.reachability.up:
                raise FleetUnavailableError("the fleet's Redis is unreachable; watch again shortly")
            metadata = context.invocation_metadata()
            who = caller(self._identities, metadata)
            checked_at = time.monotonic()
            try:
                with self._watches.held(who.principal, who.team) if who.role is not Role.ADMIN else nullcontext():
                    for response in self._executor.watch(r, is_active=context.is_active, who=who):
                        if time.monotonic() - checked_at >= IDENTITY_RECHECK_S:  # a revoked token's stream ends
                            caller(self._identities, metadata)
                            checked_at = time.monotonic()
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
    options = options or ServerOptions(max_workers=DEFAULT_WORKERS, max_concurrent_rpcs=MAX_CONCURRENT_RPCS)
    identities = options.accepted()
    executor.accounts.identities = identities
    servicer = ExecutorServicer(executor, identities)
    def unauthenticated(method: str, credentials: str, count: int) -> None:
        more = f" (and {count - 1} more since the last entry)" if count > 1 else ""
        try:
            executor.audit_log.record(NO_CALLER, "denied:call", method,
                                      f"{'no token' if credentials == 'none' else 'a token the fleet does not know'}"
                                      f"{more}")
        except redis.RedisError as e:
            log.warning("audit.unreachable", error=str(e))

    server, port, health_servicer = build_server(
        address, lambda s: executor_pb2_grpc.add_ExecutorServiceServicer_to_server(servicer, s), [SERVICE_NAME],
        options, REQUEST_BOUNDS, on_unauthenticated=unauthenticated)

    def report(up: bool) -> None:  # a load balancer stops routing to a service whose Redis is gone
        status = health_pb2.HealthCheckResponse.SERVING if up else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in (SERVICE_NAME, ""):
            health_servicer.set(name, status)
    executor.reachability.listeners.append(report)
    return server, port, health_servicer

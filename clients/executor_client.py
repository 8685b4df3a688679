"""Typed Python client of the ExecutorService; Watch reconnects by itself from the last sequence it saw."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import grpc
from tunefleet.v1 import executor_pb2, executor_pb2_grpc, plan_pb2, progress_pb2

from clients.connection import Connection, channel_for, metadata
from clients.errors import QuotaExceeded, Unavailable, from_rpc_error
from clients.planner_client import DEFAULT_TIMEOUT_S

# Watch gives up when it could not reconnect for this long; each retry waits twice as long as the last.
DEFAULT_RECONNECT_TIMEOUT_S = 60.0
_RETRY_FIRST_S, _RETRY_MAX_S = 0.2, 5.0
_TERMINAL_PHASES = (progress_pb2.PHASE_DONE, progress_pb2.PHASE_FAILED, progress_pb2.PHASE_CANCELLED)
# Codes after which the same Watch may succeed: the service restarting or draining, or briefly at its limit.
_TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED,
                        grpc.StatusCode.CANCELLED})


class ExecutorClient:
    """One caller's client. Given `channel` (a server that serves many callers, such as the dashboard), it calls
    over that shared channel with its own token and leaves the channel open on close()."""

    def __init__(self, address: str, *, token: str = "", tls_ca: bytes | None = None, tls_server_name: str = "",
                 timeout_s: float = DEFAULT_TIMEOUT_S, channel: grpc.Channel | None = None) -> None:
        connection = Connection(token, tls_ca, tls_server_name)
        self.address = address
        self._timeout_s = timeout_s
        self._metadata = metadata(connection)
        self._owns_channel = channel is None
        self._channel = channel or channel_for(address, connection)
        self._stub: Any = executor_pb2_grpc.ExecutorServiceStub(self._channel)

    def close(self) -> None:
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> ExecutorClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, rpc: str, request: Any) -> Any:
        try:
            return getattr(self._stub, rpc)(request, timeout=self._timeout_s, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc

    def submit(self, plan: plan_pb2.Plan, priority: int = executor_pb2.PRIORITY_NORMAL,
               override_budget: bool = False, team: str = "") -> executor_pb2.SubmitResponse:
        return self._call("Submit", executor_pb2.SubmitRequest(  # type: ignore[no-any-return]
            plan=plan, priority=priority, override_budget=override_budget, team=team))

    def get(self, job_id: str) -> executor_pb2.Job:
        return self._call("Get", executor_pb2.GetRequest(job_id=job_id)).job

    def list_jobs(self, phases: list[int] | None = None, gpu_class: str = "", page_size: int = 0,
             page_token: str = "") -> executor_pb2.ListResponse:
        return self._call("List", executor_pb2.ListRequest(
            phases=phases or [], gpu_class=gpu_class, page_size=page_size, page_token=page_token))

    def jobs(self, phases: list[int] | None = None, gpu_class: str = "", limit: int = 0) -> Iterator[executor_pb2.Job]:
        """Every job (newest first), page after page, up to limit (0: all)."""
        token, seen = "", 0
        while True:
            page = self.list_jobs(phases, gpu_class, page_token=token)
            for job in page.jobs:
                yield job
                seen += 1
                if limit and seen >= limit:
                    return
            token = page.next_page_token
            if not token:
                return

    def cancel(self, job_id: str, reason: str = "") -> executor_pb2.Job:
        return self._call("Cancel", executor_pb2.CancelRequest(job_id=job_id, reason=reason)).job  # type: ignore

    def fleet(self, gpu_class: str = "") -> executor_pb2.FleetResponse:
        return self._call("Fleet", executor_pb2.FleetRequest(gpu_class=gpu_class))

    def usage(self, team: str = "", since_days: int = 0,
              group_by: int = executor_pb2.USAGE_GROUPING_JOB) -> executor_pb2.UsageResponse:
        """Measured GPU time and cost, grouped (the caller's team; an admin's: every team, or `team`)."""
        return self._call("Usage", executor_pb2.UsageRequest(  # type: ignore[no-any-return]
            team=team, since_days=since_days, group_by=group_by))

    def move(self, job_id: str, gpu_class: str) -> executor_pb2.Job:
        """Re-plan a queued job for another GPU class and queue it there."""
        return self._call("Move", executor_pb2.MoveRequest(job_id=job_id, gpu_class=gpu_class)).job  # type: ignore

    def audit(self, limit: int = 0) -> list[executor_pb2.AuditEntry]:
        """The fleet's newest audit entries, oldest first (admins only)."""
        return list(self._call("Audit", executor_pb2.AuditRequest(limit=limit)).entries)

    def who_am_i(self) -> executor_pb2.WhoAmIResponse:
        """The caller's principal, team and role."""
        return self._call("WhoAmI", executor_pb2.WhoAmIRequest())  # type: ignore[no-any-return]

    def clear_host(self, host_id: str) -> str:
        """Let a quarantined host take work again; what its quarantine said."""
        return self._call("ClearHost", executor_pb2.ClearHostRequest(host_id=host_id)).quarantine_reason  # type: ignore

    def watch(self, job_id: str, after_sequence: int = 0,
              reconnect_timeout_s: float = DEFAULT_RECONNECT_TIMEOUT_S) -> Iterator[executor_pb2.WatchResponse]:
        """The job's events after after_sequence, then live ones, until a terminal event. A broken stream is
        reopened from the last sequence received, so nothing is missed or repeated; raises Unavailable when the
        service stays unreachable for reconnect_timeout_s, and typed errors (NotFound, ...) at once."""
        last, ended = after_sequence, False
        wait_s, failing_since = _RETRY_FIRST_S, None
        while True:
            call = self._stub.Watch(executor_pb2.WatchRequest(job_id=job_id, after_sequence=last),
                                    metadata=self._metadata)
            try:
                for response in call:
                    failing_since, wait_s = None, _RETRY_FIRST_S
                    if response.HasField("event"):
                        last = response.event.sequence
                        ended = response.event.phase in _TERMINAL_PHASES
                    yield response
                if ended:
                    return
                # the stream closed before the job ended (a draining service): reopen it from the last sequence
                failing_since = failing_since or time.monotonic()
                time.sleep(wait_s)
                wait_s = min(wait_s * 2, _RETRY_MAX_S)
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
                if exc.code() not in _TRANSIENT or isinstance(error, QuotaExceeded):  # a quota does not pass soon
                    raise error from exc
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > reconnect_timeout_s:
                    raise Unavailable(f"lost the Watch of {job_id} at sequence {last} and could not reconnect to "
                                      f"{self.address} for {reconnect_timeout_s:.0f} s: {exc.details()}",  # type: ignore
                                      "UNAVAILABLE") from exc
                time.sleep(wait_s)  # back off before reopening the stream from the last sequence
                wait_s = min(wait_s * 2, _RETRY_MAX_S)
            finally:
                call.cancel()  # a caller that stops early ends the server's stream too

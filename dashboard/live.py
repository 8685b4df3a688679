"""A job's events as Server-Sent Events, from the executor's Watch. Each event goes out with its sequence as the SSE
id, so a browser whose connection dropped reconnects with Last-Event-ID and the Watch resumes after it: nothing is
missed or repeated. A Watch that breaks (the executor restarting, a network blip) is reopened from the last
sequence with backoff; the stream ends after the job's terminal event."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from tunefleet.v1 import executor_pb2

from dashboard.present import TERMINAL, event_json

# How long the dashboard keeps reopening a broken Watch before it tells the page (which then reconnects itself).
RECONNECT_TIMEOUT_S = 60.0
_RETRY_FIRST_S, _RETRY_MAX_S = 0.2, 5.0
# What the browser waits before reconnecting an SSE stream that closed (milliseconds; the SSE `retry` field).
BROWSER_RETRY_MS = 3000
_TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED})


def sse(data: object, event: str = "message", event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def job_events(stub: Any, token: str, job_id: str, after_sequence: int) -> AsyncIterator[str]:
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    last, wait_s, failing_since = after_sequence, _RETRY_FIRST_S, None
    yield f"retry: {BROWSER_RETRY_MS}\n\n"
    while True:
        call = stub.Watch(executor_pb2.WatchRequest(job_id=job_id, after_sequence=last), metadata=metadata)
        try:
            async for response in call:
                failing_since, wait_s = None, _RETRY_FIRST_S
                if response.HasField("event"):
                    last = response.event.sequence
                    yield sse(event_json(response.event), "progress", last)
                    if response.event.phase in TERMINAL:
                        yield sse({"sequence": last}, "end")
                        return
                elif response.HasField("history_trimmed"):
                    yield sse({"first_available_sequence": response.history_trimmed.first_available_sequence},
                              "trimmed")
                else:
                    yield ": heartbeat\n\n"  # keeps proxies from closing an idle stream
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in _TRANSIENT:
                yield sse({"code": exc.code().name, "message": exc.details()}, "failure")
                return
        finally:
            call.cancel()
        failing_since = failing_since or time.monotonic()
        if time.monotonic() - failing_since > RECONNECT_TIMEOUT_S:
            yield sse({"code": "UNAVAILABLE", "message": "the executor is unreachable; reconnecting"}, "failure")
            return
        await asyncio.sleep(wait_s)  # back off before reopening the Watch from the last sequence
        wait_s = min(wait_s * 2, _RETRY_MAX_S)

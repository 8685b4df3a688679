"""Prometheus metrics both services expose (prometheus-client), and the HTTP endpoint that serves them.

Metric objects live in the process's default registry, created once here; services add their own
collectors (queue depth, jobs by phase) with `prometheus_client.REGISTRY.register`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from wsgiref.simple_server import WSGIServer

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, multiprocess

RPC_TOTAL = Counter("tunefleet_rpc_total", "gRPC calls handled, by method and status code", ["method", "code"])
RPC_LATENCY_S = Histogram("tunefleet_rpc_duration_seconds", "gRPC call duration (a stream: until it ends)",
                          ["method"], buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                               2.5, 10, 60, 600, 3600))

# Gauges are summed over a service's worker processes (common.processes) that are alive.
EXPENSIVE_CALLS = Gauge("tunefleet_rpc_expensive_calls", "expensive calls admitted, by pool and state (computing, "
                        "waiting for a compute slot)", ["pool", "state"], multiprocess_mode="livesum")

OPEN_STREAMS = Gauge("tunefleet_rpc_open_streams", "streaming calls open (Watch)", multiprocess_mode="livesum")

SERVING_PROCESSES = Gauge("tunefleet_serving_processes", "server processes serving the port",
                          multiprocess_mode="livesum")


# Each (method, code)'s counter and histogram, looked up once: `labels()` takes a lock and validates on every call.
# Bounded: methods are the registered ones (an unknown method is counted as "unknown"), codes gRPC's.
_RPC_CHILDREN: dict[tuple[str, str], tuple[Any, Any]] = {}


def observe_rpc(method: str, code: str, duration_s: float) -> None:
    children = _RPC_CHILDREN.get((method, code))
    if children is None:
        children = _RPC_CHILDREN[(method, code)] = (RPC_TOTAL.labels(method, code), RPC_LATENCY_S.labels(method))
    children[0].inc()
    children[1].observe(duration_s)


def start_metrics_server(address: str, multiprocess_dir: str = "") -> tuple[WSGIServer, int]:
    """Serve /metrics on host:port (port 0 picks a free one); returns the server and its port. With
    `multiprocess_dir`, the metrics of every worker process writing there (prometheus-client multiprocess mode)."""
    host, _, port = address.rpartition(":")
    registry = prometheus_client.REGISTRY
    if multiprocess_dir:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=multiprocess_dir)
    server, _thread = prometheus_client.start_http_server(int(port), addr=host or "0.0.0.0", registry=registry)
    return server, server.server_port


@contextmanager
def metrics_endpoint(address: str, multiprocess_dir: str = "") -> Iterator[int]:
    """/metrics while the block runs; nothing when address is empty (yields 0)."""
    if not address:
        yield 0
        return
    server, port = start_metrics_server(address, multiprocess_dir)
    try:
        yield port
    finally:
        server.shutdown()
        server.server_close()

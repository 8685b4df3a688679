"""Planner latency: in-process Fit (warm, and cold with every planner cache emptied first), gRPC Fit round trip,
Recommend over the full catalog, and sustained Fit throughput over gRPC with client and server in this one process
(benchmarks/load.py measures the server alone, on every core). Goals (issue 26): Fit p50 <= 50 µs, gRPC p50 <=
0.5 ms, Recommend p50 <= 10 ms. Beside the gRPC round trip, the floor under it: a bare grpcio server (no
interceptor, no admission) whose handler returns a Fit answer computed beforehand — what any Python gRPC service
costs on this machine before it does anything."""

from __future__ import annotations

import os
import platform
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
from tunefleet.v1 import hardware_pb2, model_pb2, planner_pb2, planner_pb2_grpc, training_pb2

from benchmarks.common import pct, print_table, time_calls, write_csv
from common.rpc import shutdown
from contract.schema import Hardware, Method, TrainingSpec, Workload
from planner import memo
from planner.catalog import default_catalog
from planner.fit import fit
from planner.search import Constraints, recommend
from planner.server import create_server

SUSTAINED_S = 5.0
CLIENT_THREADS = 8


def main() -> None:
    catalog = default_catalog()
    model = catalog.model("meta-llama/Llama-3.1-8B")
    t = TrainingSpec(method=Method.QLORA, micro_batch_size=1, sequence_length=2048)
    hw = Hardware(gpu=catalog.gpu("rtx-4090"), host_memory_bytes=64 * 1024**3, hourly_usd_per_gpu=0.6)
    rows: list[list[object]] = []

    fit_s = time_calls(lambda: fit(model, t, hw, catalog), 5000)
    rows.append(["fit in-process", len(fit_s), f"{pct(fit_s, 50) * 1e6:.0f} us", f"{pct(fit_s, 99) * 1e6:.0f} us",
                 "<= 50 us"])

    def cold() -> None:
        memo.clear()
        fit(model, t, hw, catalog)
    cold_s = time_calls(cold, 500)
    rows.append(["fit in-process, caches emptied", len(cold_s), f"{pct(cold_s, 50) * 1e6:.0f} us",
                 f"{pct(cold_s, 99) * 1e6:.0f} us", "first call for a model and spec"])

    request = planner_pb2.FitRequest(model=model_pb2.ModelRef(catalog_name="meta-llama/Llama-3.1-8B"),
                                     training=training_pb2.TrainingSpec(method=training_pb2.METHOD_QLORA),
                                     hardware=hardware_pb2.HardwareSpec(gpu="rtx-4090"))
    server, port, health_servicer = create_server("127.0.0.1:0", options=None)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = planner_pb2_grpc.PlannerServiceStub(channel)
    rpc_s = time_calls(lambda: stub.Fit(request), 2000)
    rows.append(["fit over gRPC (loopback)", len(rpc_s), f"{pct(rpc_s, 50) * 1e3:.2f} ms",
                 f"{pct(rpc_s, 99) * 1e3:.2f} ms", "<= 0.5 ms"])

    answer = planner_pb2.FitResponse.FromString(stub.Fit(request).SerializeToString())

    class Canned(planner_pb2_grpc.PlannerServiceServicer):
        def Fit(self, request, context):  # noqa: N802
            return answer

    bare = grpc.server(ThreadPoolExecutor(CLIENT_THREADS))
    planner_pb2_grpc.add_PlannerServiceServicer_to_server(Canned(), bare)
    bare_port = bare.add_insecure_port("127.0.0.1:0")
    bare.start()
    with grpc.insecure_channel(f"127.0.0.1:{bare_port}") as bare_channel:
        bare_stub = planner_pb2_grpc.PlannerServiceStub(bare_channel)
        floor_s = time_calls(lambda: bare_stub.Fit(request), 2000)
    bare.stop(0)
    rows.append(["the floor: bare grpcio server, canned answer", len(floor_s), f"{pct(floor_s, 50) * 1e3:.2f} ms",
                 f"{pct(floor_s, 99) * 1e3:.2f} ms", "what grpcio itself costs here"])

    workload = Workload(dataset_tokens=10_000_000)
    rec_s = time_calls(lambda: recommend(model, t, workload, Constraints(), catalog), 30, warmup=3)
    rows.append(["recommend, full catalog", len(rec_s), f"{pct(rec_s, 50) * 1e3:.1f} ms",
                 f"{pct(rec_s, 99) * 1e3:.1f} ms", "<= 10 ms"])

    done = 0
    deadline = time.perf_counter() + SUSTAINED_S

    def worker() -> int:
        n = 0
        while time.perf_counter() < deadline:
            stub.Fit(request)
            n += 1
        return n

    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        done = sum(pool.map(lambda _: worker(), range(CLIENT_THREADS)))
    rows.append([f"sustained fit over gRPC, {CLIENT_THREADS} client threads in this process", done,
                 f"{done / SUSTAINED_S:,.0f} req/s", "", f"{os.cpu_count()} cores, reported"])
    channel.close()
    shutdown(server, health_servicer, 1.0)

    header = ["benchmark", "calls", "p50 / rate", "p99", "target"]
    print_table(f"Planner latency ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)", header, rows)
    print(f"\nwrote {write_csv('latency.csv', header, rows)}")


if __name__ == "__main__":
    main()

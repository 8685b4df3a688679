"""`tunefleet health`: ask a service's gRPC health endpoint whether it serves — for container health checks
and Kubernetes exec probes (Kubernetes' own gRPC probe speaks no TLS; this does)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

EXIT_SERVING = 0
EXIT_NOT_SERVING = 1
EXIT_UNREACHABLE = 3
DEFAULT_TIMEOUT_S = 5.0


def add_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    h = sub.add_parser("health", help="check a service's gRPC health (exit 0 serving, 1 not serving, 3 unreachable)",
                       description="Ask the gRPC health service of a tunefleet service (planner or executor) whether "
                                   "it serves; for container HEALTHCHECKs and Kubernetes exec probes.")
    h.add_argument("address", help="host:port of the service, e.g. 127.0.0.1:50051")
    h.add_argument("--service", default="", help="a service name to ask about (default: the server as a whole)")
    h.add_argument("--tls-ca", type=Path, help="PEM CA bundle: connect with TLS (the server runs with --tls-cert)")
    h.add_argument("--tls-server-name", default="",
                   help="the name the server's certificate is for, when it differs from ADDRESS's host (a probe "
                        "inside the pod connects to 127.0.0.1)")
    h.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S, help="give up after (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    if args.tls_ca:
        options = [("grpc.ssl_target_name_override", args.tls_server_name)] if args.tls_server_name else []
        channel = grpc.secure_channel(args.address, grpc.ssl_channel_credentials(args.tls_ca.read_bytes()),
                                      options=options)
    else:
        channel = grpc.insecure_channel(args.address)
    with channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=args.service),
                                                               timeout=args.timeout_s)
        except grpc.RpcError as e:
            print(f"tunefleet health: {args.address}: {e.code().name}: {e.details()}", file=sys.stderr)
            return EXIT_UNREACHABLE
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(f"{args.address}: {status}")
    return EXIT_SERVING if reply.status == health_pb2.HealthCheckResponse.SERVING else EXIT_NOT_SERVING

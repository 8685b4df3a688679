"""`tunefleet health`: ask a service's gRPC health endpoint whether it serves — for container health checks
and Kubernetes exec probes (Kubernetes' own gRPC probe speaks no TLS; this does). Given an http(s) URL (the
dashboard's /healthz), it asks over HTTP instead: serving when the answer is 200."""

from __future__ import annotations

import argparse
import ssl
import sys
import urllib.error
import urllib.request

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from clients import connection
from common import exit_status

DEFAULT_TIMEOUT_S = 5.0


def add_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    h = sub.add_parser("health", help=f"check a service's gRPC health (exit {exit_status.OK} serving, "
                                      f"{exit_status.FAILED} not serving, {exit_status.UNAVAILABLE} unreachable, "
                                      f"{exit_status.NOT_FOUND} no such service)",
                       description="Ask the gRPC health service of a tunefleet service (planner or executor) whether "
                                   "it serves; for container HEALTHCHECKs and Kubernetes exec probes.")
    h.add_argument("address", help="host:port of the service, e.g. 127.0.0.1:50051, or the dashboard's health URL, "
                                   "e.g. http://127.0.0.1:8080/healthz")
    h.add_argument("--service", default="", help="a service name to ask about (default: the server as a whole)")
    connection.add_arguments(h, token=False)  # health checks need no token
    h.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S, help="give up after (default %(default)s)")


def _http(args: argparse.Namespace) -> int:
    context = None
    if args.address.startswith("https://") and args.tls_ca:
        context = ssl.create_default_context(cafile=str(args.tls_ca))
    try:
        with urllib.request.urlopen(args.address, timeout=args.timeout_s, context=context) as reply:  # noqa: S310
            status = reply.status
    except urllib.error.HTTPError as e:
        status = e.code
    except (urllib.error.URLError, OSError) as e:
        print(f"tunefleet health: {args.address}: unreachable: {getattr(e, 'reason', e)}", file=sys.stderr)
        return exit_status.UNAVAILABLE
    print(f"{args.address}: {'SERVING' if status == 200 else f'NOT_SERVING (HTTP {status})'}")
    return exit_status.OK if status == 200 else exit_status.FAILED


def run(args: argparse.Namespace) -> int:
    if args.address.startswith(("http://", "https://")):
        return _http(args)
    with connection.channel_for(args.address, connection.from_arguments(args, args.address, "tunefleet health")) \
            as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=args.service),
                                                               timeout=args.timeout_s)
        except grpc.RpcError as e:
            print(f"tunefleet health: {args.address}: {e.code().name}: {e.details()}", file=sys.stderr)
            return exit_status.NOT_FOUND if e.code() == grpc.StatusCode.NOT_FOUND else exit_status.UNAVAILABLE
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(f"{args.address}: {status}")
    return exit_status.OK if reply.status == health_pb2.HealthCheckResponse.SERVING else exit_status.FAILED

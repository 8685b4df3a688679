"""The serve loop both services share: address, bearer token and TLS flags; run until SIGTERM/SIGINT,
then drain in-flight calls."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import grpc
import structlog
from grpc_health.v1 import health

from common.log import configure_logging
from common.metrics import metrics_endpoint
from common.rpc import ServerOptions, shutdown

SHUTDOWN_GRACE_S = 10.0
TOKEN_ENV = "TUNEFLEET_TOKEN"


def add_server_arguments(parser: argparse.ArgumentParser, default_address: str, workers: int) -> None:
    parser.add_argument("--address", default=default_address,
                        help="host:port to bind; port 0 picks a free one (default %(default)s)")
    parser.add_argument("--token-file", type=Path, help="require 'authorization: Bearer <token>' with this token "
                        f"(or set {TOKEN_ENV})")
    parser.add_argument("--tls-cert", type=Path, help="PEM certificate chain; enables TLS with --tls-key")
    parser.add_argument("--tls-key", type=Path, help="PEM private key")
    parser.add_argument("--workers", type=int, default=workers, help="request threads (default %(default)s)")
    parser.add_argument("--metrics-address", default="",
                        help="serve Prometheus /metrics on host:port (e.g. 0.0.0.0:9100); off when empty")


def server_options(parser: argparse.ArgumentParser, args: argparse.Namespace,
                   max_concurrent_rpcs: int) -> ServerOptions:
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    token = os.environ.get(TOKEN_ENV, "")
    if args.token_file:
        try:
            token = args.token_file.read_text().strip()
        except OSError as e:
            parser.error(f"--token-file {args.token_file}: {e.strerror}")
        if not token:
            parser.error(f"--token-file {args.token_file} is empty: put the token in it, or leave --token-file out "
                         "to serve without authentication")
    def read(flag: str, path: Path | None) -> bytes:
        try:
            return path.read_bytes() if path else b""
        except OSError as e:
            parser.error(f"{flag} {path}: {e.strerror}")

    return ServerOptions(max_workers=args.workers, max_concurrent_rpcs=max_concurrent_rpcs, token=token,
                         tls_cert_chain=read("--tls-cert", args.tls_cert), tls_private_key=read("--tls-key", args.tls_key))


def run_until_signalled(name: str, start: Callable[[], tuple[grpc.Server, int, health.HealthServicer]],
                        options: ServerOptions, metrics_address: str,
                        on_stop: Callable[[], None] = lambda: None) -> int:
    """Start the server, log where it listens, wait for SIGTERM/SIGINT, then drain, stop, and call on_stop."""
    configure_logging()
    log = structlog.get_logger(f"tunefleet.{name}")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with metrics_endpoint(metrics_address) as metrics_port:
        server, port, health_servicer = start()
        server.start()
        log.info(f"{name}.serving", port=port, tls=bool(options.tls_cert_chain), auth=bool(options.token),
                 metrics_port=metrics_port or None)
        stop.wait()
        log.info(f"{name}.draining", grace_s=SHUTDOWN_GRACE_S)
        shutdown(server, health_servicer, SHUTDOWN_GRACE_S)
        on_stop()
    log.info(f"{name}.stopped")
    return 0

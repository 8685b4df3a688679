"""The serve loop both services share: address, bearer token and TLS flags; run until SIGTERM/SIGINT,
then drain in-flight calls."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import grpc
import structlog
from grpc_health.v1 import health

from common import exit_status
from common.identity import Identities, IdentitiesError
from common.log import configure_logging
from common.metrics import SERVING_PROCESSES, metrics_endpoint
from common.rpc import RESERVED_WORKERS, ServerOptions, health_server, shutdown

SHUTDOWN_GRACE_S = 10.0
# Seconds between reporting NOT_SERVING and refusing connections (Kubernetes: endpoints update within ~1-5 s).
DEFAULT_DRAIN_DELAY_S = 2.0
MAX_DRAIN_DELAY_S = 60.0
# How long a computing thread keeps the GIL while another waits (CPython's default is 5 ms): shorter, so that a
# health check or a cheap call waiting behind a long search gets its turn sooner, at a little throughput.
GIL_SWITCH_INTERVAL_S = 0.001
TOKEN_ENV = "TUNEFLEET_TOKEN"


def add_server_arguments(parser: argparse.ArgumentParser, default_address: str, threads: int) -> None:
    parser.add_argument("--address", default=default_address,
                        help="host:port to bind; port 0 picks a free one (default %(default)s)")
    parser.add_argument("--token-file", type=Path, help="require 'authorization: Bearer <token>' with this token "
                        f"(or set {TOKEN_ENV}): one caller, the fleet's admin")
    parser.add_argument("--auth-file", type=Path,
                        help="identities: a TOML file of [[identity]] tables (principal, team, role viewer / "
                             "submitter / admin, token_sha256), reloaded when it changes; instead of --token-file")
    parser.add_argument("--tls-cert", type=Path, help="PEM certificate chain; enables TLS with --tls-key")
    parser.add_argument("--tls-key", type=Path, help="PEM private key")
    parser.add_argument("--threads", type=int, default=threads,
                        help="request threads of each server process (default %(default)s)")
    parser.add_argument("--compute-slots", type=int, default=ServerOptions.compute_slots,
                        help="expensive calls of each kind computing at once; more wait (up to the free threads) or "
                             "are refused with RESOURCE_EXHAUSTED (default %(default)s: one process computes on one "
                             "core at a time; run more processes (planner: --workers) or replicas for more)")
    parser.add_argument("--health-address", default="",
                        help="also serve gRPC health on this host:port, with threads of its own, so that probes "
                             "there are answered even when every request thread is busy (off when empty)")
    parser.add_argument("--drain-delay-s", type=float, default=DEFAULT_DRAIN_DELAY_S,
                        help="on SIGTERM, report NOT_SERVING and keep serving this long before refusing calls "
                             "(default %(default)s); a second SIGTERM exits at once")
    parser.add_argument("--metrics-address", default="",
                        help="serve Prometheus /metrics on host:port (e.g. 0.0.0.0:9100); off when empty")


def server_options(parser: argparse.ArgumentParser, args: argparse.Namespace,
                   max_concurrent_rpcs: int) -> ServerOptions:
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    def read(flag: str, path: Path | None) -> bytes:
        try:
            return path.read_bytes() if path else b""
        except OSError as e:
            parser.error(f"{flag} {path}: {e.strerror}")

    identities = None
    if args.auth_file:
        if args.token_file:
            parser.error("give --auth-file or --token-file, not both (an admin in the auth file does what the token "
                         "file's token did)")
        try:
            identities = Identities.from_file(args.auth_file)
        except IdentitiesError as e:
            parser.error(f"--auth-file: {e}")
    token = "" if identities else os.environ.get(TOKEN_ENV, "")
    if args.token_file:
        token = read("--token-file", args.token_file).decode().strip()
        if not token:
            parser.error(f"--token-file {args.token_file} is empty: put the token in it, or leave --token-file out "
                         "to serve without authentication")
    if args.threads <= RESERVED_WORKERS:
        parser.error(f"--threads must be more than {RESERVED_WORKERS} (threads kept for health checks)")
    if args.compute_slots < 1:
        parser.error("--compute-slots must be at least 1")
    if not 0 <= args.drain_delay_s <= MAX_DRAIN_DELAY_S:
        parser.error(f"--drain-delay-s must be between 0 and {MAX_DRAIN_DELAY_S}")
    return ServerOptions(max_workers=args.threads, max_concurrent_rpcs=max_concurrent_rpcs, token=token,
                         identities=identities,
                         compute_slots=args.compute_slots, tls_cert_chain=read("--tls-cert", args.tls_cert),
                         tls_private_key=read("--tls-key", args.tls_key))


def run_until_signalled(name: str, start: Callable[[], tuple[grpc.Server, int, health.HealthServicer]],
                        options: ServerOptions, metrics_address: str, drain_delay_s: float = 0.0,
                        on_stop: Callable[[], None] = lambda: None, health_address: str = "",
                        on_serving: Callable[[int], None] = lambda port: None) -> int:
    """Start the server, log where it listens, call `on_serving(port)`, wait for SIGTERM/SIGINT; then report
    NOT_SERVING, keep serving for `drain_delay_s` (load balancers see the health change and stop sending), refuse
    new calls, give running ones SHUTDOWN_GRACE_S, cancel the rest, and call on_stop. A second signal exits at
    once."""
    configure_logging()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    log = structlog.get_logger(f"tunefleet.{name}")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with metrics_endpoint(metrics_address) as metrics_port:
        try:
            server, port, health_servicer = start()
        except OSError as e:  # the address could not be bound (common.rpc._bind)
            log.error(f"{name}.cannot_serve", error=str(e))
            return exit_status.UNAVAILABLE
        server.start()
        probes, probe_port = health_server(health_address, health_servicer, options) if health_address else (None, 0)
        log.info(f"{name}.serving", port=port, tls=bool(options.tls_cert_chain), auth=options.accepted() is not None,
                 metrics_port=metrics_port or None, health_port=probe_port or None)
        SERVING_PROCESSES.inc()
        on_serving(port)
        stop.wait()

        def force(signum: int, _frame: object) -> None:
            log.warning(f"{name}.forced_stop", signal=signal.Signals(signum).name)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(exit_status.FAILED)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, force)  # a second signal ends the process now
        log.info(f"{name}.draining", drain_delay_s=drain_delay_s, grace_s=SHUTDOWN_GRACE_S)
        shutdown(server, health_servicer, SHUTDOWN_GRACE_S, drain_delay_s)
        SERVING_PROCESSES.dec()
        if probes is not None:
            probes.stop(0)
        on_stop()
    log.info(f"{name}.stopped")
    return 0

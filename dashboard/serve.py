"""`tunefleet serve dashboard`: parse the flags, bind the address (port 0: a free one, logged), serve until SIGTERM."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys

import structlog

from clients import connection
from common.log import configure_logging

log = structlog.get_logger("dashboard")
DEFAULT_ADDRESS = "127.0.0.1:8080"
ROOT_PATH_ENV = "TUNEFLEET_DASHBOARD_ROOT_PATH"

DESCRIPTION = """\
Serve the tunefleet dashboard over HTTP: the jobs with their live curves, the fleet, and the planner's answer
as a picture. A stateless gRPC client of the executor and planner services: people log in with the tokens the
CLI takes (their role decides what the pages offer, and the executor checks it again on every call); sessions
live in this process (a restart asks people to log in again).

Behind an ingress that serves it under a path, pass that path as --root-path (e.g. /tunefleet). Behind HTTPS,
pass --cookie-secure.

exit status: 0 stopped, 2 bad flags, 3 the address cannot be bound."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tunefleet serve dashboard", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", default=DEFAULT_ADDRESS, help="host:port to serve HTTP on (default %(default)s)")
    p.add_argument("--executor", default=os.environ.get("TUNEFLEET_EXECUTOR", ""),
                   help="the executor service, host:port (env TUNEFLEET_EXECUTOR; required)")
    p.add_argument("--planner", default=os.environ.get("TUNEFLEET_PLANNER", ""),
                   help="the planner service, host:port (env TUNEFLEET_PLANNER; default: plan in this process)")
    p.add_argument("--root-path", default=os.environ.get(ROOT_PATH_ENV, ""),
                   help=f"the path prefix an ingress serves the dashboard under, e.g. /tunefleet (env {ROOT_PATH_ENV})")
    p.add_argument("--request-receipt-s", type=float, default=None,
                   help="close a connection whose request has not fully arrived this many seconds after it opened "
                        "(or after its previous response): slow or half-open clients cannot hold connections "
                        "(default 10)")
    p.add_argument("--cookie-secure", action="store_true",
                   help="mark the session cookie Secure (the dashboard is reached over HTTPS)")
    connection.add_arguments(p.add_argument_group("connection to the services"), token=False)
    return p


def _bind(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    # listening before "dashboard.serving" is logged: a client that reads that line and connects while uvicorn still
    # starts waits in the backlog (uvicorn's default, 2048) instead of being refused (seen under load in the suite)
    sock.listen(2048)
    return sock


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if not args.executor:
        p.error("--executor is required: the executor service's host:port (or set TUNEFLEET_EXECUTOR)")
    if args.root_path and (not args.root_path.startswith("/") or args.root_path.endswith("/")):
        p.error(f"--root-path {args.root_path!r}: write it as /prefix (a leading slash, no trailing one)")
    if args.request_receipt_s is not None and not 0 < args.request_receipt_s <= 3600:
        p.error(f"--request-receipt-s {args.request_receipt_s:g}: give seconds above 0 and at most 3600")
    if not args.address.rpartition(":")[2].isdigit():
        p.error(f"--address {args.address!r}: write host:port, e.g. {DEFAULT_ADDRESS} (port 0: a free one)")
    try:
        import uvicorn

        from dashboard.app import create_app
        from dashboard.backends import Backends
        from dashboard.slow_clients import (
            MAX_CONNECTIONS,
            REQUEST_RECEIPT_S,
            deadline_protocol,
            raise_file_limit,
            sample_server_logs,
        )
        from dashboard.web import Dashboard, DashboardConfig
    except ImportError as e:
        print(f"tunefleet serve dashboard: {e.name} is not installed; pip install 'tunefleet[dashboard]'",
              file=sys.stderr)
        return 2
    configure_logging()
    conn = connection.from_arguments(args, args.executor, "tunefleet serve dashboard")
    try:
        sock = _bind(args.address)
    except OSError as e:
        print(f"tunefleet serve dashboard: cannot bind {args.address}: {e.strerror}", file=sys.stderr)
        return 3
    app = create_app(Dashboard(Backends(args.executor, args.planner, conn),
                               DashboardConfig(cookie_secure=args.cookie_secure)), args.root_path)
    sample_server_logs()
    raise_file_limit()
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, proxy_headers=True,
                                           timeout_graceful_shutdown=5,
                                           http=deadline_protocol(args.request_receipt_s or REQUEST_RECEIPT_S),
                                           limit_concurrency=MAX_CONNECTIONS))
    host, port = sock.getsockname()[:2]
    log.info("dashboard.serving", host=host, port=port, url=f"http://{args.address.rpartition(':')[0]}:{port}"
             f"{args.root_path}/", executor=args.executor, planner=args.planner or "in-process")
    # uvicorn stops gracefully on SIGTERM/SIGINT, then raises the signal again to the handler it found: a no-op one
    # here, so a stop exits 0 as the help says.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    server.run(sockets=[sock])
    log.info("dashboard.stopped")
    return 0

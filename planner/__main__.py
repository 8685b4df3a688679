"""python -m planner: serve the PlannerService until SIGTERM/SIGINT, then drain gracefully."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path

import structlog

from planner.log import configure_logging
from planner.rpc import ServerOptions, shutdown
from planner.server import create_server

DEFAULT_ADDRESS = "127.0.0.1:50051"
SHUTDOWN_GRACE_S = 10.0


def serve(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m planner", description="Serve the tunefleet PlannerService.")
    parser.add_argument("--address", default=os.environ.get("TUNEFLEET_PLANNER_BIND", DEFAULT_ADDRESS),
                        help="host:port to bind; port 0 picks a free one (default %(default)s)")
    parser.add_argument("--token-file", type=Path, help="require 'authorization: Bearer <token>' with this token "
                        "(or set TUNEFLEET_TOKEN)")
    parser.add_argument("--tls-cert", type=Path, help="PEM certificate chain; enables TLS with --tls-key")
    parser.add_argument("--tls-key", type=Path, help="PEM private key")
    parser.add_argument("--workers", type=int, default=8, help="request threads (default %(default)s)")
    args = parser.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    configure_logging()
    log = structlog.get_logger("tunefleet.planner")
    token = args.token_file.read_text().strip() if args.token_file else os.environ.get("TUNEFLEET_TOKEN", "")
    options = ServerOptions(max_workers=args.workers, token=token,
                            tls_cert_chain=args.tls_cert.read_bytes() if args.tls_cert else b"",
                            tls_private_key=args.tls_key.read_bytes() if args.tls_key else b"")
    server, port, health_servicer = create_server(args.address, options=options)
    server.start()
    log.info("planner.serving", port=port, tls=bool(args.tls_cert), auth=bool(token))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    log.info("planner.draining", grace_s=SHUTDOWN_GRACE_S)
    shutdown(server, health_servicer, SHUTDOWN_GRACE_S)
    log.info("planner.stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(serve())

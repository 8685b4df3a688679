"""python -m planner: serve the PlannerService until SIGTERM/SIGINT, then drain gracefully."""

from __future__ import annotations

import argparse
import os

from common.serve import add_server_arguments, run_until_signalled, server_options
from planner.server import create_server

DEFAULT_ADDRESS = "127.0.0.1:50051"
# Threads are cheap while they wait: RESERVED_WORKERS for health and List calls, the CPU count computing, the
# rest holding expensive calls that wait for a compute slot (beyond them, RESOURCE_EXHAUSTED at once).
DEFAULT_WORKERS = 32
MAX_CONCURRENT_RPCS = 64  # Fit answers in ~1 ms: a deeper backlog only adds latency


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tunefleet serve planner", description="Serve the tunefleet PlannerService.")
    add_server_arguments(parser, os.environ.get("TUNEFLEET_PLANNER_BIND", DEFAULT_ADDRESS), DEFAULT_WORKERS)
    return parser


def serve(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    options = server_options(parser, args, MAX_CONCURRENT_RPCS)
    return run_until_signalled("planner", lambda: create_server(args.address, options=options), options,
                               args.metrics_address, args.drain_delay_s, health_address=args.health_address)


if __name__ == "__main__":
    raise SystemExit(serve())

"""`tunefleet serve planner` (python -m planner): serve the PlannerService until SIGTERM/SIGINT, then drain
gracefully; one process per core behind one port (common.processes), or in this process with --workers 1."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
from multiprocessing.connection import Connection
from pathlib import Path

from common.lifetime import die_with_parent
from common.processes import available_cpus, serve_processes
from common.rpc import RESERVED_WORKERS
from common.serve import add_server_arguments, run_until_signalled, server_options
from contract.errors import InvalidFieldError
from planner.catalog import Catalog, calibrated_catalog
from planner.server import create_server

DEFAULT_ADDRESS = "127.0.0.1:50051"
# Calls in flight per process before RESOURCE_EXHAUSTED, and threads to hold them: a waiting call blocks a thread,
# not the CPU, and waits its turn in arrival order. 128 Fits drain in ~80 ms at a process's ~1,600/s; refusing
# earlier made clients back off while the server idled (200 clients: 58 ok/s and 808 errors at 64 calls and 32
# threads; 1,584-1,620/s and none at 128 and 132, make bench). The bound also caps queued request bytes (128 × the
# 4 MiB message limit).
MAX_CONCURRENT_RPCS = 128
DEFAULT_THREADS = MAX_CONCURRENT_RPCS + RESERVED_WORKERS
EXIT_ORPHANED = 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tunefleet serve planner", description="Serve the tunefleet PlannerService.")
    add_server_arguments(parser, os.environ.get("TUNEFLEET_PLANNER_BIND", DEFAULT_ADDRESS), DEFAULT_THREADS)
    parser.add_argument("--calibration", type=Path, default=os.environ.get("TUNEFLEET_CALIBRATION") or None,
                        help="plan with the fleet's own runs: the file 'tunefleet calibrate --out FILE' writes (env "
                             "TUNEFLEET_CALIBRATION); Fit's range then says what backs it and how likely the job fits")
    parser.add_argument("--workers", type=int, default=available_cpus(),
                        help="server processes sharing the port, each computing on a core of its own (default "
                             "%(default)s: the CPUs this process may use, a container's CPU limit included); 1 "
                             "serves in this process")
    return parser


def _catalog(parser: argparse.ArgumentParser, calibration: Path | None) -> Catalog:
    try:
        return calibrated_catalog(calibration)
    except InvalidFieldError as e:
        parser.error(f"--calibration: {e.description}")


def serve(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    options = server_options(parser, args, MAX_CONCURRENT_RPCS)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    _catalog(parser, args.calibration)  # a bad file refuses to start here, not in each worker
    if args.workers == 1:
        catalog = _catalog(parser, args.calibration)
        return run_until_signalled("planner", lambda: create_server(args.address, catalog, options=options), options,
                                   args.metrics_address, args.drain_delay_s, health_address=args.health_address)
    worker_argv = sys.argv[1:] if argv is None else argv
    return serve_processes("planner", args.workers, functools.partial(_worker, worker_argv), args.address, options,
                           args.metrics_address, args.health_address, args.drain_delay_s)


def _worker(argv: list[str] | None, address: str, ready: Connection) -> int:
    """One of the server processes: the same flags, bound to the reserved port alongside the others; the parent
    serves health probes and metrics for all of them. It leaves the terminal's process group (Ctrl-C reaches the
    parent, which drains every worker once) and dies with the parent."""
    os.setpgrp()
    die_with_parent(EXIT_ORPHANED)
    parser = build_parser()
    args = parser.parse_args(argv)
    options = dataclasses.replace(server_options(parser, args, MAX_CONCURRENT_RPCS), reuse_port=True)
    catalog = _catalog(parser, args.calibration)
    return run_until_signalled("planner.worker", lambda: create_server(address, catalog, options=options), options, "",
                               args.drain_delay_s, on_serving=lambda _port: ready.send("serving"))

"""python -m executor: serve the ExecutorService until SIGTERM/SIGINT, then drain gracefully."""

from __future__ import annotations

import argparse
import os
import sys

import redis

from common.serve import add_server_arguments, run_until_signalled, server_options
from executor.server import DEFAULT_WORKERS, MAX_CONCURRENT_RPCS, connect, create_server
from executor.service import ExecutorConfig
from executor.store import DEFAULT_EVENTS_MAX_LEN
from executor.watch import DEFAULT_HEARTBEAT_INTERVAL_S

DEFAULT_ADDRESS = "127.0.0.1:50052"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


def serve(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tunefleet serve executor",
        description="Serve the tunefleet ExecutorService: Submit plans to the fleet's Redis queues, Get/List/Cancel "
                    "jobs, Watch their progress, and see the Fleet. Workers run with 'tunefleet worker'.")
    add_server_arguments(parser, os.environ.get("TUNEFLEET_EXECUTOR_BIND", DEFAULT_ADDRESS), DEFAULT_WORKERS)
    parser.add_argument("--redis", default=os.environ.get("TUNEFLEET_REDIS", DEFAULT_REDIS),
                        help="Redis URL of the fleet (env TUNEFLEET_REDIS; default %(default)s)")
    parser.add_argument("--heartbeat-interval-s", type=float, default=DEFAULT_HEARTBEAT_INTERVAL_S,
                        help="Watch sends a heartbeat after this many idle seconds (default %(default)s)")
    parser.add_argument("--events-max-len", type=int, default=DEFAULT_EVENTS_MAX_LEN,
                        help="events kept per job stream, oldest trimmed first (default %(default)s)")
    args = parser.parse_args(argv)
    if args.heartbeat_interval_s <= 0 or args.events_max_len < 1:
        parser.error("--heartbeat-interval-s must be > 0 and --events-max-len >= 1")
    options = server_options(parser, args, MAX_CONCURRENT_RPCS)
    config = ExecutorConfig(heartbeat_interval_s=args.heartbeat_interval_s, events_max_len=args.events_max_len)
    executor = connect(args.redis, config)
    try:
        executor.redis.ping()
    except redis.RedisError as e:
        print(f"tunefleet serve executor: cannot reach Redis at {args.redis} ({e}); start redis-server or pass "
              "--redis URL", file=sys.stderr)
        return 3
    return run_until_signalled("executor", lambda: create_server(args.address, executor, options), options,
                               args.metrics_address, on_stop=executor.close)


if __name__ == "__main__":
    raise SystemExit(serve())

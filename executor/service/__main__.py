"""python -m executor.service (tunefleet serve executor): serve the ExecutorService until SIGTERM/SIGINT, then
drain gracefully."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import redis

from common.serve import add_server_arguments, run_until_signalled, server_options
from executor.service.server import DEFAULT_WORKERS, MAX_CONCURRENT_RPCS, connect, create_server
from executor.service.servicer import (
    DEFAULT_MAX_QUEUED_PER_CALLER,
    DEFAULT_MAX_QUEUED_PER_TEAM,
    DEFAULT_MAX_WATCHES_PER_CALLER,
    DEFAULT_MAX_WATCHES_PER_TEAM,
    ExecutorConfig,
)
from executor.service.watch import DEFAULT_HEARTBEAT_INTERVAL_S
from fleet import connection, redis_url
from fleet.connection import reach
from fleet.jobs import DEFAULT_EVENTS_MAX_LEN
from fleet.recovery import (
    DEFAULT_PREEMPT_CHECKPOINT_S,
    DEFAULT_RETRY_BACKOFF_S,
    DEFAULT_RETRY_LIMIT,
    MAX_RETRY_BACKOFF_S,
    FleetPolicy,
)
from fleet.retention import (
    DEFAULT_MAX_RECORDS_PER_TEAM,
    DEFAULT_MAX_STORED_BYTES_PER_TEAM,
    DEFAULT_RETENTION_S,
    DEFAULT_SUBMITS_PER_MINUTE_PER_CALLER,
    DEFAULT_SUBMITS_PER_MINUTE_PER_TEAM,
    Quotas,
)

DEFAULT_ADDRESS = "127.0.0.1:50052"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tunefleet serve executor",
        description="Serve the tunefleet ExecutorService: Submit plans to the fleet's Redis queues, Get/List/Cancel "
                    "jobs, Watch their progress, and see the Fleet. Workers run with 'tunefleet worker'.")
    add_server_arguments(parser, os.environ.get("TUNEFLEET_EXECUTOR_BIND", DEFAULT_ADDRESS), DEFAULT_WORKERS)
    parser.add_argument("--redis", type=redis_url.argument, default=os.environ.get("TUNEFLEET_REDIS", DEFAULT_REDIS),
                        help="Redis URL of the fleet (env TUNEFLEET_REDIS; default %(default)s): redis://host:port/db, "
                             "or redis+sentinel://host:26379[,host:26379...]/service[/db] behind Sentinel")
    parser.add_argument("--heartbeat-interval-s", type=float, default=DEFAULT_HEARTBEAT_INTERVAL_S,
                        help="Watch sends a heartbeat after this many idle seconds (default %(default)s)")
    parser.add_argument("--events-max-len", type=int, default=DEFAULT_EVENTS_MAX_LEN,
                        help="events kept per job stream, oldest trimmed first (default %(default)s)")
    parser.add_argument("--max-queued-per-caller", type=int, default=DEFAULT_MAX_QUEUED_PER_CALLER,
                        help="jobs one caller (a principal, or a bearer token) may keep waiting; Submit beyond it "
                             "answers RESOURCE_EXHAUSTED (0: no cap; default %(default)s)")
    parser.add_argument("--max-queued-per-team", type=int, default=DEFAULT_MAX_QUEUED_PER_TEAM,
                        help="jobs one team (--auth-file) may keep waiting, its members' together (0: no cap; "
                             "default %(default)s)")
    parser.add_argument("--max-watches-per-caller", type=int, default=DEFAULT_MAX_WATCHES_PER_CALLER,
                        help="Watch streams one caller may hold open on this server (dashboard tabs count); the next "
                             "answers RESOURCE_EXHAUSTED (0: no cap; default %(default)s)")
    parser.add_argument("--max-watches-per-team", type=int, default=DEFAULT_MAX_WATCHES_PER_TEAM,
                        help="Watch streams one team may hold open on this server, so that no team takes every "
                             "stream slot (0: no cap; default %(default)s)")
    kept = parser.add_argument_group("what the fleet keeps", "per caller and team, so that no loop can fill Redis "
                                                           "(0: no limit)")
    kept.add_argument("--submits-per-minute-per-caller", type=int, default=DEFAULT_SUBMITS_PER_MINUTE_PER_CALLER,
                      help="Submits one caller may make a minute; more answer RESOURCE_EXHAUSTED with when to retry "
                           "(default %(default)s)")
    kept.add_argument("--submits-per-minute-per-team", type=int, default=DEFAULT_SUBMITS_PER_MINUTE_PER_TEAM,
                      help="Submits one team's members may make a minute together (default %(default)s)")
    kept.add_argument("--max-records-per-team", type=int, default=DEFAULT_MAX_RECORDS_PER_TEAM,
                      help="job records one team may have stored, finished ones within the retention included "
                           "(default %(default)s)")
    kept.add_argument("--max-stored-mib-per-team", type=int, default=DEFAULT_MAX_STORED_BYTES_PER_TEAM // 2**20,
                      help="MiB one team's job records may hold (default %(default)s)")
    kept.add_argument("--retention-days", type=float, default=DEFAULT_RETENTION_S / 86_400,
                      help="a finished job's record is deleted this many days after it finished; its holds stay in "
                           "the ledger and its Submit and Cancel in the audit log (default %(default)g)")
    policy = parser.add_argument_group(
        "fleet policy", "stored in the fleet's Redis for every worker and service; a flag left out keeps the "
                        "fleet's current setting")
    policy.add_argument("--preemption", choices=("on", "off"),
                        help="on: a high-priority job waiting on a busy GPU class makes a lower-priority job "
                             "checkpoint and yield its host (it resumes later); off: strict queue order "
                             "(default off)")
    policy.add_argument("--preempt-min-runtime-s", type=float,
                        help="a job that has held its host for less is never preempted (the victim is otherwise the "
                             "lowest-priority job that loses the least work since its last checkpoint; default 0)")
    policy.add_argument("--preempt-checkpoint-s", type=float,
                        help="a preemption victim (or a reclaimed borrower) is asked to checkpoint now and must have "
                             "stopped within this many seconds; past it, it is interrupted and resumes from its "
                             f"previous checkpoint (default {DEFAULT_PREEMPT_CHECKPOINT_S:g})")
    policy.add_argument("--retry-limit", type=int,
                        help=f"lost hosts a job survives (requeued from its checkpoint each time); the next one "
                             f"fails it (default {DEFAULT_RETRY_LIMIT})")
    policy.add_argument("--retry-backoff-s", type=float,
                        help=f"wait before retry n: this × 2^(n-1), at most {MAX_RETRY_BACKOFF_S:g} s "
                             f"(default {DEFAULT_RETRY_BACKOFF_S:g})")
    return parser


def serve(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.heartbeat_interval_s <= 0 or args.events_max_len < 1 or min(
            args.max_queued_per_caller, args.max_queued_per_team, args.max_watches_per_caller,
            args.max_watches_per_team) < 0:
        parser.error("--heartbeat-interval-s must be > 0, --events-max-len >= 1 and --max-queued-per-caller, "
                     "--max-queued-per-team, --max-watches-per-caller and --max-watches-per-team >= 0")
    if (args.retry_limit is not None and args.retry_limit < 0) or \
            (args.retry_backoff_s is not None and not 0 <= args.retry_backoff_s <= MAX_RETRY_BACKOFF_S):
        parser.error(f"--retry-limit must be >= 0 and --retry-backoff-s between 0 and {MAX_RETRY_BACKOFF_S:g}")
    if args.preempt_min_runtime_s is not None and not 0 <= args.preempt_min_runtime_s <= 7 * 24 * 3600:
        parser.error("--preempt-min-runtime-s must be between 0 and a week (604800)")
    if args.preempt_checkpoint_s is not None and not 0 < args.preempt_checkpoint_s <= 24 * 3600:
        parser.error("--preempt-checkpoint-s must be above 0 and at most a day (86400)")
    if min(args.submits_per_minute_per_caller, args.submits_per_minute_per_team, args.max_records_per_team,
           args.max_stored_mib_per_team) < 0 or not 0 < args.retention_days <= 3650:
        parser.error("--submits-per-minute-per-caller, --submits-per-minute-per-team, --max-records-per-team and "
                     "--max-stored-mib-per-team must be >= 0, and --retention-days between 0 and 3650")
    options = server_options(parser, args, MAX_CONCURRENT_RPCS)
    try:
        fleet_policy = _policy(args)
    except redis.RedisError as e:
        print(f"tunefleet serve executor: cannot reach Redis at {redis_url.parse_redis_url(args.redis).redacted()} "
              f"({e}); start redis-server or pass "
              "--redis URL", file=sys.stderr)
        return 3
    config = ExecutorConfig(heartbeat_interval_s=args.heartbeat_interval_s, events_max_len=args.events_max_len,
                            policy=fleet_policy, max_queued_per_caller=args.max_queued_per_caller,
                            max_queued_per_team=args.max_queued_per_team,
                            max_watches_per_caller=args.max_watches_per_caller,
                            max_watches_per_team=args.max_watches_per_team,
                            quotas=Quotas(args.submits_per_minute_per_caller, args.submits_per_minute_per_team,
                                          args.max_records_per_team, args.max_stored_mib_per_team * 2**20,
                                          int(args.retention_days * 86_400)))
    executor = connect(args.redis, config)
    try:
        reach(executor.connection)
    except redis.RedisError as e:
        print(f"tunefleet serve executor: cannot reach Redis at {redis_url.parse_redis_url(args.redis).redacted()} "
              f"({e}); start redis-server or pass "
              "--redis URL", file=sys.stderr)
        return 3
    return run_until_signalled("executor", lambda: create_server(args.address, executor, options), options,
                               args.metrics_address, args.drain_delay_s, on_stop=executor.close,
                               health_address=args.health_address)


def _policy(args: argparse.Namespace) -> FleetPolicy | None:
    """The fleet's stored policy with the flags given applied; None when no policy flag was given."""
    if args.preemption is None and args.retry_limit is None and args.retry_backoff_s is None and \
            args.preempt_min_runtime_s is None and args.preempt_checkpoint_s is None:
        return None
    current = FleetPolicy.load(connection.connect(args.redis))
    return dataclasses.replace(
        current, **{k: v for k, v in (("preemption", None if args.preemption is None else args.preemption == "on"),
                                      ("retry_limit", args.retry_limit),
                                      ("retry_backoff_s", args.retry_backoff_s),
                                      ("preempt_min_runtime_s", args.preempt_min_runtime_s),
                                      ("preempt_checkpoint_s", args.preempt_checkpoint_s)) if v is not None})


if __name__ == "__main__":
    raise SystemExit(serve())

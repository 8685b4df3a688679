"""`tunefleet worker`: parse the flags, register this host, and serve its class's queues until drained."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import redis
import structlog

from common import exit_status
from common.log import configure_logging
from common.net import route_address
from contract.errors import PlanError
from contract.paths import Roots
from contract.progress import DEFAULT_PROGRESS_INTERVAL_S
from contract.run_config import DEFAULT_KEEP_CHECKPOINTS
from contract.store import WORKER_STORE_ENV, worker_store
from executor.worker import gpu_health
from executor.worker import runtime as worker_runtime
from executor.worker.gpus import detect_gpus
from executor.worker.launching import Launcher, start_training
from executor.worker.runtime import DEFAULT_DRAIN_GRACE_S, DEFAULT_WORK_DIR, WorkerRuntime
from executor.worker.watchdog import DEFAULT_HANG_FACTOR, DEFAULT_HANG_FLOOR_S, HangPolicy
from fleet import queues, redis_url
from fleet.fairshare import FairShare
from fleet.gangs import DEFAULT_GANG_TIMEOUT_S
from fleet.hosts import HEARTBEAT_INTERVAL_S, HostGpus, default_host_id
from fleet.leases import LEASE_TTL_S, RENEW_INTERVAL_S
from fleet.redis_url import parse_redis_url
from planner.catalog import Catalog, default_catalog

log = structlog.get_logger("executor.worker")


def _heartbeats(runtime: WorkerRuntime, done: threading.Event) -> None:
    """Check this host's GPUs (quarantined when sick), refresh its record and sweep the fleet (lost hosts, due
    retries, preemption)."""
    while not done.wait(HEARTBEAT_INTERVAL_S):
        try:
            runtime.health.check()
            runtime.heartbeat()
            runtime.sweeper.sweep()
        except redis.RedisError as e:
            log.warning("worker.heartbeat_failed", error=str(e))


def _fair_share(runtime: WorkerRuntime, fair: FairShare) -> list[str] | None:
    """Before each dequeue: the class's queues get their part of its start order (fleet.fairshare) in front; the
    queues to take from, in that order (None: all, in tier order; []: none, every waiting job is held back by its
    team's limit). A failure only leaves the queues in FIFO and tier order."""
    try:
        return fair.arrange(runtime.gpus.gpu_class)
    except redis.RedisError as e:
        log.warning("worker.fair_share_failed", error=str(e))
        return None


DESCRIPTION = """\
Run a fleet worker on this host: register it (GPU class from NVML, or 'cpu' without GPUs), take jobs from
the queues tunefleet.<class>.high, .normal and .low (in that order; within a tier, teams share by weight and
recent usage), and run each with DeepSpeed through 'tunefleet train'. Relative output paths of plans land
under --work-dir.

SIGTERM or Ctrl-C drains the worker: the running job writes a checkpoint at the end of its current step
(within --drain-grace-s, else it is interrupted and keeps its last checkpoint) and is requeued at the front of
its queue, to resume on the next worker of its class. Keep a pod's termination grace period above
--drain-grace-s + 60 s.

With more than one worker in a class, a job whose host is lost resumes on another worker from its last complete
checkpoint, which must reach that worker: either --work-dir is storage every worker mounts at the same path (NFS,
a ReadWriteMany volume; say so with --work-dir-shared), or every worker keeps checkpoints in an object store
(--checkpoint-store s3://bucket/prefix; credentials and endpoint from the standard AWS environment, profile or
instance role, AWS_ENDPOINT_URL for a store other than AWS's). A one-node job's checkpoints are uploaded in the
background and sealed with a manifest; a job that resumes on a host that never saw it downloads the newest one.

A plan with hardware.nodes = N > 1 runs on N workers of its class at once (a gang): the worker that takes it
leads (node 0, global rank 0) and N-1 idle workers of the class join it; all start torchrun together against
the leader's --address. A gang that has not formed within --gang-timeout-s gives its hosts back and tries again
after a backoff; losing any node stops every node's ranks and the job resumes from its last checkpoint under
the fleet's retry limit. Its output must be on storage every worker mounts (--work-dir-shared).

Plans read only under --data-root and write only under --output-root (default: --work-dir); workers that
resume each other's jobs share TUNEFLEET_CHECKPOINT_KEY (checkpoints are signed with it).

exit status: 0 stopped, 2 the checkpoint store cannot be used, 4 Redis unreachable at start."""


def _address_towards(redis_url: str) -> str:
    """The address peers that reach the same Redis reach this host on (loopback for a unix-socket Redis); behind
    Sentinel, the route to the first sentinel."""
    address = parse_redis_url(redis_url)
    if address.managed:
        return route_address(*address.sentinels[0])
    url = urllib.parse.urlsplit(address.url)
    if url.scheme == "unix" or not url.hostname:
        return "127.0.0.1"
    return route_address(url.hostname, url.port or 6379)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tunefleet worker", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--redis", type=redis_url.argument,
                   default=os.environ.get("TUNEFLEET_REDIS", "redis://127.0.0.1:6379/0"),
                   help="Redis URL of the fleet (env TUNEFLEET_REDIS; default %(default)s): redis://host:port/db, or "
                        "redis+sentinel://host:26379[,host:26379...]/service[/db] behind Sentinel (README, Storage "
                        "and Redis)")
    p.add_argument("--gpu-class", help="serve this class instead of the one NVML reports (e.g. cpu)")
    p.add_argument("--host-id", default=default_host_id(), help="this host's id in the fleet (default %(default)s)")
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR,
                   help="where plans with a relative output path write (default %(default)s)")
    p.add_argument("--progress-interval-s", type=float, default=DEFAULT_PROGRESS_INTERVAL_S,
                   help="seconds between training progress events (default %(default)s)")
    p.add_argument("--work-dir-shared", action="store_true",
                   help="--work-dir is shared storage every worker mounts at the same path (required for plans "
                        "with a relative output when the class has several workers)")
    p.add_argument("--drain-grace-s", type=float, default=DEFAULT_DRAIN_GRACE_S,
                   help="on SIGTERM or preemption, how long the job may take to checkpoint (default %(default)s)")
    p.add_argument("--lease-ttl-s", type=float, default=LEASE_TTL_S,
                   help="a job's lease outlives the last renewal (every 5 s) by this long; a lost host's job is "
                        "requeued after it (default %(default)s)")
    p.add_argument("--address", default=os.environ.get("TUNEFLEET_WORKER_ADDRESS", ""),
                   help="the address other hosts of a multi-node gang reach this one on (env "
                        "TUNEFLEET_WORKER_ADDRESS; default: this host's address on the route to Redis)")
    p.add_argument("--gang-timeout-s", type=float, default=DEFAULT_GANG_TIMEOUT_S,
                   help="how long a multi-node job led by this worker waits for its gang to form before it gives "
                        "the joined hosts back and retries after a backoff (default %(default)s)")
    p.add_argument("--hang-after-s", type=float, default=DEFAULT_HANG_FLOOR_S,
                   help="a run that completes no step for this long, and for --hang-factor of its step time, is "
                        "hung: its ranks' stacks are saved, it is stopped and requeued from its last checkpoint "
                        "(an infrastructure failure); loading and checkpointing never count (0: off; default "
                        "%(default)s)")
    p.add_argument("--hang-factor", type=float, default=DEFAULT_HANG_FACTOR,
                   help="see --hang-after-s (default %(default)s)")
    Roots.add_arguments(p)
    p.add_argument("--team-roots", action="store_true",
                   help="for a fleet of several teams: each team's jobs read only under <data-root>/teams/<team> and "
                        "write only under <output-root>/teams/<team> (a relative output lands in "
                        "<work-dir>/teams/<team>), so no job reads another team's data or outputs or squats a folder "
                        "of another team's; catalog and hub models are unaffected")
    p.add_argument("--checkpoint-store", default=os.environ.get(WORKER_STORE_ENV, ""), metavar="URI",
                   help="keep runs' checkpoints (and final exports) in this object store too, e.g. s3://bucket/fleet, "
                        "so that a job resumes on a host that shares no filesystem with this one (env "
                        f"{WORKER_STORE_ENV}; checked at start)")
    p.add_argument("--store-keep", type=int, default=DEFAULT_KEEP_CHECKPOINTS, metavar="N",
                   help="the newest N sealed checkpoints of a job stay in the store (older ones are deleted only "
                        "after a newer one is sealed); default %(default)s")
    p.add_argument("--burst", action="store_true", help="exit when the queues are empty")
    return p


def main(argv: list[str] | None = None, detect: Callable[[Catalog], HostGpus] = detect_gpus,
         launcher: Launcher = start_training) -> int:
    """`tunefleet worker`; `detect` reads this host's GPUs and `launcher` starts a run (a simulated host passes its own:
    devtools.sim_worker)."""
    p = build_parser()
    args = p.parse_args(argv)
    if args.lease_ttl_s < 2 * RENEW_INTERVAL_S or args.drain_grace_s < 0:
        p.error(f"--lease-ttl-s must be at least {2 * RENEW_INTERVAL_S:g} (two renewals) and --drain-grace-s >= 0")
    if not args.gang_timeout_s > 0:
        p.error("--gang-timeout-s must be positive")
    if args.store_keep < 1:
        p.error("--store-keep must be at least 1: the newest sealed checkpoint is what a lost host resumes from")
    if args.hang_after_s < 0 or not args.hang_factor > 0:
        p.error("--hang-after-s must be >= 0 (0: off) and --hang-factor positive")
    configure_logging()
    if args.checkpoint_store:
        try:
            worker_store(args.checkpoint_store)
        except PlanError as e:
            print(f"tunefleet worker: --checkpoint-store {e.description}", file=sys.stderr)
            return exit_status.BAD_INPUT
    gpus = detect(default_catalog())
    if args.gpu_class:
        gpus = HostGpus(args.gpu_class, gpus.gpu_count, gpus.gpu_memory_bytes, gpus.device_name)
    work_dir = args.work_dir.resolve()
    try:
        address = args.address or _address_towards(args.redis)
    except OSError as e:
        p.error(f"cannot tell this host's address on the route to {args.redis} ({e}); pass --address")
    runtime = WorkerRuntime(args.redis, args.host_id, gpus, work_dir, Roots.from_arguments(args, work_dir),
                            team_roots=args.team_roots, progress_interval_s=args.progress_interval_s,
                            lease_ttl_s=args.lease_ttl_s, drain_grace_s=args.drain_grace_s,
                            work_dir_shared=args.work_dir_shared, checkpoint_store=args.checkpoint_store,
                            store_keep=args.store_keep,
                            address=address,
                            gang_timeout_s=args.gang_timeout_s, hang=HangPolicy(args.hang_factor, args.hang_after_s),
                            gpu_health=gpu_health.source(), launcher=launcher)
    try:
        runtime.health.check()
        runtime.heartbeat()
    except redis.RedisError as e:
        print(f"tunefleet worker: cannot reach Redis at {parse_redis_url(args.redis).redacted()} ({e}); start "
              "redis-server or pass --redis URL", file=sys.stderr)
        return exit_status.UNAVAILABLE
    worker_runtime.install(runtime)
    fair = FairShare(runtime.redis)
    done = threading.Event()
    beats = threading.Thread(target=_heartbeats, args=(runtime, done), daemon=True)
    beats.start()
    log.info("worker.started", host_id=runtime.host_id, gpu_class=gpus.gpu_class, gpus=gpus.gpu_count,
             queues=runtime.queues, work_dir=str(runtime.work_dir))
    try:
        queues.work(runtime.redis, runtime.queues, runtime.host_id, on_shutdown=runtime.stopping.set,
                    paused=lambda: runtime.health.reason is not None, burst=args.burst,
                    before_dequeue=lambda: _fair_share(runtime, fair))
    finally:
        done.set()
        try:
            runtime.registry.remove(runtime.host_id)
        except redis.RedisError as e:  # Redis is gone: the record expires on its own (HOST_TTL_S)
            log.warning("worker.unregister_failed", error=str(e))
        log.info("worker.stopped", host_id=runtime.host_id)
    return 0


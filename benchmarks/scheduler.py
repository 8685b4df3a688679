"""`make bench-scheduler`: the fleet's scheduling measured on a simulated fleet — the real scheduler code (fair share,
quotas, borrowing and reclaim, preemption, the sweep), a real redis-server, the real executor service and real
`tunefleet worker` processes, whose runs are devtools.sim_train: each holds its host for the job's predicted duration
× --scale (no torch), checkpoints every few steps and yields when preempted. A trace of jobs from four teams with
different weights and quotas, three priority tiers, on hosts of three GPU classes (one GPU each).

The whole trace is queued while the workers are suspended (rq's suspension), then they are let go: demand exceeds
supply from that moment until each class's queue runs dry.

Reported: GPU utilisation while demand exceeds supply (each class until its last job started), each team's share of
each class's GPU-time while every team still had jobs of it waiting, against its weight and quota, the GPU-time a team
with work waiting spent below its quota, median and p95 wait per tier, the error of the expected start `tunefleet
fleet` gave every job as the fleet was let go (against its first start, as a share of the wait), GPU-seconds lost to
preemption and reclaim, and the scheduler's cost per dequeue (the worker's arrangement of a class with 500 waiting
jobs).

Expected starts are also measured at submit, as a user sees them: a fifth as many jobs again arrive one by one while
the fleet runs (high-tier ones preempt, a team under its quota reclaims), and `tunefleet get` is asked right after
each submit. For these and for the trace: the share of jobs whose first start fell inside the range shown (goal
>= 80 %) and the median error, each beside the same replay without preemption and reclaim (fleet.eta before it
modelled them), computed at the same moment from the same reading of the fleet.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis
from rq.suspension import resume, suspend
from tunefleet.v1 import executor_pb2, progress_pb2

from benchmarks.common import pct, print_table, stop_processes, time_calls, write_csv
from common.identity import Directory, Identities, Identity, Role, TeamPolicy
from common.rpc import ServerOptions, shutdown
from contract.progress import TERMINAL_PHASES
from devtools.local_redis import start_redis_server, stop_redis_server
from devtools.sim_train import SCALE_ENV
from devtools.tiny import build_model, counting_text, make_plan
from executor.service.server import connect, create_server
from executor.service.servicer import Executor, ExecutorConfig
from executor.service.waiting import RUNNING_FIELDS, OrderCache
from fleet import queues
from fleet.events import EventLog
from fleet.fairshare import FairShare
from fleet.hosts import HostRegistry
from fleet.jobs import JobStore, NewJob, now_ms
from fleet.keys import job_key
from fleet.ledger import GIVEN_BACK, Ledger, hold_models
from fleet.lifecycle import Lifecycle
from fleet.ordering import TeamShare
from fleet.recovery import FleetPolicy

HOSTS = {"a100-80gb": 32, "l40s-48gb": 24, "h100-sxm-80gb": 8}  # 64 simulated hosts, one GPU each
# team: weight; each team's quota on a class is GUARANTEED of its weight's share of the hosts, the rest is borrowed
# by fair share (so a team's share of contended time should come out at its weight's share).
WEIGHTS = {"vision": 1.0, "speech": 1.0, "nlp": 2.0, "research": 1.0}
GUARANTEED = 0.75
# Simulated seconds per predicted second: an hour's job holds its host for 24 s. The per-run start-up on this
# benchmark's 2-core machine (64 workers: ~3 s at this scale, ~10 s at 1/600, where runs start 4 times as often) must
# stay small beside a run, as a real run's start-up does beside hours of training.
DEFAULT_SCALE = 1 / 150
WARM_UP_TEAM = "warm-up"
ADMIN = Identity("bench", "ops", Role.ADMIN)  # who asks for the expected starts
TEAMS = {team: (w, {c: int(GUARANTEED * n * w / sum(WEIGHTS.values())) for c, n in HOSTS.items()})
         for team, w in WEIGHTS.items()}
TIERS = ((executor_pb2.PRIORITY_HIGH, 0.1), (executor_pb2.PRIORITY_NORMAL, 0.7), (executor_pb2.PRIORITY_LOW, 0.2))
MEDIAN_JOB_S = 3600.0  # predicted durations: lognormal around an hour, 10 min to 6 h
# below_quota: "no team below its quota while it has work", less the transients a sampled fleet always shows (a job's
# end to the next one's start, a reclaimed borrower's last step): at most 2 % of the quota's GPU-time
GOALS = {"utilisation": 0.95, "share_error": 0.05, "eta_error_median": 0.20, "below_quota": 0.02,
         "eta_inside_range": 0.80}
# How late a start may be and still count as inside the range shown: what no estimate models, the dequeue and the
# launch of a simulated run on this benchmark's loaded 2-core machine (a few seconds of wall time).
START_SLACK_S = 5.0
ARRIVALS_SHARE = 0.2  # jobs arriving while the fleet runs, as a share of the trace
ARRIVALS_OVER_S = 300.0  # wall seconds after the fleet is let go over which they arrive (uniformly)


def arriving(jobs: int, seed: int) -> list[dict[str, object]]:
    """Jobs that arrive while the fleet runs: ARRIVALS_SHARE of the trace's count, as the trace draws them, each at a
    uniform time ("arrive_s", wall seconds after the fleet is let go) within ARRIVALS_OVER_S, soonest first."""
    rng = random.Random(seed)
    out = [{**j, "job_id": f"arrival-{i:04d}", "arrive_s": rng.uniform(0, ARRIVALS_OVER_S)}
           for i, j in enumerate(trace(int(jobs * ARRIVALS_SHARE), seed))]
    return sorted(out, key=lambda j: float(j["arrive_s"]))  # type: ignore[arg-type]


def trace(jobs: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    classes = list(HOSTS)
    out = []
    for i in range(jobs):
        team = rng.choice(list(TEAMS))
        gpu_class = rng.choices(classes, weights=[HOSTS[c] for c in classes])[0]
        priority = rng.choices([t for t, _ in TIERS], weights=[w for _, w in TIERS])[0]
        duration_s = min(6 * 3600.0, max(600.0, rng.lognormvariate(0, 0.8) * MEDIAN_JOB_S))
        out.append({"job_id": f"job-{i:04d}", "team": team, "gpu_class": gpu_class, "priority": priority,
                    "duration_s": duration_s})
    return out


@dataclass(frozen=True)
class Shown:
    """An expected start as shown at `asked_ms` (absolute ms), with the replay that models yields and without."""

    asked_ms: int
    now: tuple[int, int, int]  # expected, earliest, latest
    before: tuple[int, int, int]  # the same replay without preemption and reclaim

    def moved_to(self, at_ms: int) -> Shown:
        """The same answer counted from `at_ms` (the trace's: asked while the fleet was suspended, from its release)."""
        d = at_ms - self.asked_ms
        return Shown(at_ms, (self.now[0] + d, self.now[1] + d, self.now[2] + d),
                     (self.before[0] + d, self.before[1] + d, self.before[2] + d))

    def inside(self, start_ms: int, before: bool = False) -> bool:
        _, earliest, latest = self.before if before else self.now
        return earliest <= start_ms <= latest + START_SLACK_S * 1000

    def error(self, start_ms: int, before: bool = False) -> float:
        """How far the expected start was from the first start, as a share of the wait."""
        expected = (self.before if before else self.now)[0]
        return abs(expected - start_ms) / max(start_ms - self.asked_ms, 1)


def shown_starts(executor: Executor, connection: redis.Redis, classes: dict[str, str]) -> dict[str, Shown]:
    """What the service answers now for the jobs' expected starts (job id -> its GPU class): one job as `tunefleet get`
    asks (Get), many as `tunefleet fleet` does (Fleet); beside each, the replay without yields over the same reading
    of the fleet (hosts and running jobs read once, before the service reads them)."""
    hosts = HostRegistry(connection).hosts()
    busy = sorted({h.running_job_id for h in hosts if h.running_job_id})
    running = dict(zip(busy, JobStore(connection).read(busy, RUNNING_FIELDS), strict=True))
    before = OrderCache(FairShare(connection))  # without use_fleet: the replay as it was, without yields
    fields = ("expected_start", "expected_start_earliest", "expected_start_latest")
    answered: list[executor_pb2.Job | executor_pb2.PendingJob]
    if len(classes) == 1:
        answered = [executor.get(executor_pb2.GetRequest(job_id=next(iter(classes))), ADMIN).job]
    else:
        answered = list(executor.fleet(executor_pb2.FleetRequest(), ADMIN).pending)
    out = {}
    for job in answered:
        old = before.starts(classes[job.job_id], hosts, running).get(job.job_id) if job.job_id in classes else None
        if old is None or not job.HasField("expected_start"):
            continue
        at = before.at_ms
        now = tuple(getattr(job, f).ToMilliseconds() for f in fields)
        out[job.job_id] = Shown(at, (now[0], now[1], now[2]),
                                (at + int(old.in_s.mid_s * 1000), at + int(old.in_s.low_s * 1000),
                                 at + int(old.in_s.high_s * 1000)))
    return out


def start_workers(url: str, work: Path, scale: float) -> list[subprocess.Popen[bytes]]:
    env = dict(os.environ, **{SCALE_ENV: str(scale)}, OMP_NUM_THREADS="1")
    procs = []
    for gpu_class, count in HOSTS.items():
        for i in range(count):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "devtools.sim_worker", "1", "worker", "--redis", url, "--gpu-class", gpu_class,
                 "--host-id", f"{gpu_class}-{i:02d}", "--work-dir", str(work / "shared"), "--work-dir-shared",
                 "--data-root", str(work), "--progress-interval-s", "0", "--hang-after-s", "0", "--drain-grace-s",
                 "5"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True))
    return procs


def job_phases(connection: redis.Redis, jobs: list[dict[str, object]]) -> list[int]:
    pipe = connection.pipeline(transaction=False)
    for j in jobs:
        pipe.hget(job_key(str(j["job_id"])), "phase")
    return [int(ph or 0) for ph in pipe.execute()]


class QuotaWatch:
    """Samples, once a second, each team's GPUs held on each class against its quota there while it has jobs of that
    class waiting: the GPU-seconds a team with work spent below its quota (transients included: the moments between a
    job's end and the next one's start, and a reclaim's checkpoint)."""

    def __init__(self, fair: FairShare, jobs: list[dict[str, object]]) -> None:
        self.fair, self.jobs = fair, jobs
        self.below_gpu_s: dict[str, float] = defaultdict(float)
        self.quota_gpu_s: dict[str, float] = defaultdict(float)
        self._last = time.monotonic()

    def sample(self, phases: list[int]) -> None:
        snapshot = self.fair.snapshot()
        now = time.monotonic()
        dt, self._last = now - self._last, now
        waiting = {(str(j["gpu_class"]), str(j["team"])) for j, ph in zip(self.jobs, phases, strict=True)
                   if ph == progress_pb2.PHASE_QUEUED}
        for gpu_class, team in waiting:
            quota = snapshot.shares[team].quota_gpus.get(gpu_class, 0)
            held = snapshot.held_gpus.get(gpu_class, {}).get(team, 0)
            self.quota_gpu_s[team] += quota * dt
            self.below_gpu_s[team] += max(0, quota - held) * dt


def wait_until_done(connection: redis.Redis, jobs: list[dict[str, object]],
                    each_second: Callable[[list[int]], None] = lambda phases: None) -> list[int]:
    """Wait (at most an hour) until every job has ended; their phases."""
    deadline = time.monotonic() + 3600
    while True:
        phases = job_phases(connection, jobs)
        if all(ph in TERMINAL_PHASES for ph in phases):
            return phases
        if time.monotonic() > deadline:
            left = sum(ph not in TERMINAL_PHASES for ph in phases)
            raise SystemExit(f"{left} jobs did not finish within an hour")
        each_second(phases)
        time.sleep(1)


def first_start_ms(events: EventLog, job_id: str) -> int | None:
    for e in events.read_after(job_id, 0, 10_000):
        if e.phase == progress_pb2.PHASE_LOADING:
            return int(e.time.ToMilliseconds())
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scheduler", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--scale", type=float, default=DEFAULT_SCALE,
                   help="simulated seconds per predicted second (default 1/150: a median job of 24 s; at 1/600 the "
                        "start-up of 64 runs on a 2-core machine is as long as a job)")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-scheduler-"))
    (work / "shared").mkdir()
    redis_proc, url = start_redis_server(work)
    connection = redis.Redis.from_url(url)
    executor = connect(url, ExecutorConfig(policy=FleetPolicy(preemption=True, preempt_min_runtime_s=0)))
    teams = {name: TeamPolicy(name, None, weight, quota) for name, (weight, quota) in TEAMS.items()}
    server, _, health = create_server("127.0.0.1:0", executor, ServerOptions(identities=Identities(
        Directory({}, teams, {}))))
    server.start()
    executor.publish_shares()
    workers = start_workers(url, work, args.scale)
    try:
        registry = HostRegistry(connection)
        deadline = time.monotonic() + 180
        while len(registry.hosts()) < sum(HOSTS.values()):
            if time.monotonic() > deadline:
                raise SystemExit("the simulated workers did not all register within 180 s")
            time.sleep(0.5)
        print(f"{sum(HOSTS.values())} simulated hosts registered; submitting {args.jobs} jobs", file=sys.stderr)
        model, data = build_model(work / "model"), counting_text(work / "data.jsonl", records=8)
        lifecycle = Lifecycle(connection)
        jobs = trace(args.jobs, args.seed)

        def submit(j: dict[str, object]) -> None:
            plan = make_plan(model, data, Path(str(j["job_id"])), plan_id=str(j["job_id"]))
            plan.output_uri = str(j["job_id"])
            plan.hardware.gpu = str(j["gpu_class"])
            d = float(j["duration_s"])  # type: ignore[arg-type]
            plan.prediction.estimate.duration_s, plan.prediction.estimate.duration_s_low = d, d * 0.8
            plan.prediction.estimate.duration_s_high = d * 1.3
            lifecycle.submit(NewJob(plan=plan,
                                    queue=queues.QueueRef(str(j["gpu_class"]), int(j["priority"])),  # type: ignore
                                    gpus=1, timeout_s=24 * 3600, team=str(j["team"]),
                                    submitter=str(j["team"]), predicted_s=(d * args.scale, d * 0.8 * args.scale,
                                                                           d * 1.3 * args.scale)))

        # a warm-up round (a team of its own, two jobs a host) teaches the fleet its hold model per class (fleet.ledger:
        # held time against predicted, start-up included), as a fleet in service knows it from its past runs
        warm_up = [{**j, "job_id": f"warm-up-{i:03d}", "team": WARM_UP_TEAM, "priority": executor_pb2.PRIORITY_NORMAL}
                   for i, j in enumerate(trace(2 * sum(HOSTS.values()), args.seed + 1))]
        for j in warm_up:
            submit(j)
        wait_until_done(connection, warm_up)
        print(f"warm-up done; hold models {hold_models(connection)}", file=sys.stderr)
        suspend(connection)  # rq's suspension: the workers take nothing until the whole trace waits
        for j in jobs:
            submit(j)
        # every queued job's expected start, as `tunefleet fleet` shows it, counted from the moment the fleet is let go
        shown = shown_starts(executor, connection, {str(j["job_id"]): str(j["gpu_class"]) for j in jobs})
        t0 = now_ms()
        resume(connection)
        shown = {job_id: x.moved_to(t0) for job_id, x in shown.items()}
        print("every job queued; the fleet runs them", file=sys.stderr)
        arrivals = arriving(args.jobs, args.seed + 2)
        due = iter(arrivals)
        coming = next(due, None)
        quota_watch = QuotaWatch(FairShare(connection), jobs + arrivals)

        def each_second(phases: list[int]) -> None:
            nonlocal coming
            quota_watch.sample(phases)
            while coming is not None and now_ms() >= t0 + float(coming["arrive_s"]) * 1000:  # type: ignore[arg-type]
                submit(coming)  # then asked at once, as a user does after submitting
                shown.update(shown_starts(executor, connection, {str(coming["job_id"]): str(coming["gpu_class"])}))
                coming = next(due, None)

        phases = wait_until_done(connection, jobs + arrivals, each_second)
        failed = sum(ph != progress_pb2.PHASE_DONE for ph in phases)
        report(jobs, arrivals, connection, t0, shown, failed, quota_watch, args.scale)
    finally:
        stop_processes(workers)
        shutdown(server, health, 1.0)
        executor.close()
        stop_redis_server(redis_proc)
    return 0


def report(trace_jobs: list[dict[str, object]], arrivals: list[dict[str, object]], connection: redis.Redis, t0: int,
           shown: dict[str, Shown], failed: int, quota_watch: QuotaWatch, scale: float) -> None:
    """The tables: the hosts' use, the teams' shares, waits and the expected starts measured on every job (the trace
    and the arrivals); the tiers' waits on the trace (all queued at t0)."""
    jobs = trace_jobs + arrivals
    events = EventLog(connection)
    starts = {str(j["job_id"]): first_start_ms(events, str(j["job_id"])) for j in jobs}
    holds = Ledger(connection).holds(t0, 1_000_000)
    rows: list[list[object]] = []
    # utilisation per class while its queue held jobs: from t0 until its last job first started
    for gpu_class, hosts in HOSTS.items():
        of_class = [str(j["job_id"]) for j in jobs if j["gpu_class"] == gpu_class]
        window_end = max(s for j in of_class if (s := starts[j]) is not None)
        busy = sum(max(0, min(int(h["end_ms"]), window_end) - max(int(h["start_ms"]), t0)) for h in holds
                   if h["class"] == gpu_class)
        util = busy / (hosts * (window_end - t0))
        rows.append(["utilisation while contended", gpu_class, f"{util:.1%}", f">= {GOALS['utilisation']:.0%}",
                     "met" if util >= GOALS["utilisation"] else "missed"])
    # each team's share of the GPU-time of each class while every team had jobs of the class waiting (until the first
    # team's last job there started), against its weight: quotas come first (whatever the tier), the hosts beyond
    # them go by tier and weighted fair share
    contended_end = {c: min(max((s for j in jobs if j["team"] == team and j["gpu_class"] == c
                                 and (s := starts[str(j["job_id"])]) is not None), default=t0) for team in TEAMS)
                     for c in HOSTS}
    class_of = {str(j["job_id"]): str(j["gpu_class"]) for j in jobs}
    by_team: dict[str, float] = defaultdict(float)
    for h in holds:
        if h["job"] in class_of:
            end = contended_end[class_of[h["job"]]]
            by_team[h["team"]] += max(0, min(int(h["end_ms"]), end) - max(int(h["start_ms"]), t0))
    total = sum(by_team.values()) or 1.0
    weights = sum(w for w, _ in TEAMS.values())
    all_gpus = sum(HOSTS.values())
    for team, (weight, quota) in TEAMS.items():
        share = by_team[team] / total
        off = share - weight / weights
        rows.append([f"share of contended GPU-time: {team}", "all", f"{share:.1%}",
                     f"weight {weight / weights:.1%} (quota {sum(quota.values()) / all_gpus:.1%})",
                     f"{off:+.1%} vs weight: {'met' if abs(off) <= GOALS['share_error'] else 'missed'}"])
    for team in TEAMS:
        below = quota_watch.below_gpu_s[team] / (quota_watch.quota_gpu_s[team] or 1.0)
        rows.append([f"below quota with work waiting: {team}", "all", f"{below:.1%} of its quota's GPU-time",
                     f"<= {GOALS['below_quota']:.0%}", "met" if below <= GOALS["below_quota"] else "missed"])
    for tier, _ in TIERS:
        waits = [(starts[str(j["job_id"])] - t0) / 1000 for j in trace_jobs  # type: ignore[operator]
                 if j["priority"] == tier and starts[str(j["job_id"])] is not None]
        name = executor_pb2.Priority.Name(tier).removeprefix("PRIORITY_").lower()
        rows.append([f"wait, {name} tier (s)", "all",
                     f"median {statistics.median(waits):.1f}, p95 {pct(waits, 95):.1f}", "", f"{len(waits)} jobs"])
    for name, group in (("as the trace was let go", trace_jobs), ("at submit, arrivals", arrivals)):
        measured = [(x, s) for j in group if (x := shown.get(str(j["job_id"]))) and (s := starts[str(j["job_id"])])]
        for before in (False, True):
            inside = sum(x.inside(s, before) for x, s in measured) / max(len(measured), 1)
            errors = [x.error(s, before) for x, s in measured]
            eta = statistics.median(errors) if errors else float("nan")
            which = "replay without preemption and reclaim (before)" if before else "fleet.eta"
            rows.append([f"start inside the range shown {name}", "all", f"{inside:.1%}",
                         f">= {GOALS['eta_inside_range']:.0%}" if not before else "",
                         f"{which}; {len(measured)} jobs"])
            rows.append([f"expected start error {name} (median, share of the wait)", "all", f"{eta:.1%}",
                         f"<= {GOALS['eta_error_median']:.0%}" if not before else "", which])
    lost = sum(float(h["lost_gpu_s"]) for h in holds if h["outcome"] == GIVEN_BACK)
    yields = sum(1 for h in holds if h["outcome"] == GIVEN_BACK)
    rows.append(["GPU-seconds lost to preemption and reclaim", "all", f"{lost:,.1f}", "",
                 f"{yields} yields; {failed} jobs not DONE"])
    yielded: dict[str, int] = defaultdict(int)
    for h in holds:
        if h["outcome"] == GIVEN_BACK:
            yielded[h["team"]] += 1
    rows.append(["yields by the yielding job's team", "all", ", ".join(f"{t} {yielded[t]}" for t in TEAMS), "",
                 "borrowers are reclaimed first"])
    fair = FairShare(connection)
    queue = queues.QueueRef("bench-overhead", executor_pb2.PRIORITY_NORMAL)
    lifecycle = Lifecycle(connection)
    template = jobs[0]
    for i in range(500):
        plan = make_plan(Path("/m"), Path("/d.jsonl"), Path(f"o-{i}"), plan_id=f"overhead-{i}")
        lifecycle.submit(NewJob(plan=plan, queue=queue, gpus=1, timeout_s=60,
                                team=list(TEAMS)[i % len(TEAMS)], submitter=str(template["team"])))
    fair.save_shares({name: TeamShare(w, q) for name, (w, q) in TEAMS.items()})
    timings = time_calls(lambda: fair.arrange("bench-overhead"), 50, warmup=5)
    rows.append(["scheduler cost per dequeue (500 waiting, 4 teams)", "-",
                 f"median {statistics.median(timings) * 1000:.1f} ms, p95 {pct(timings, 95) * 1000:.1f} ms", "", ""])
    header = ["measure", "class", "value", "goal / reference", "note"]
    print_table(f"Scheduler on {sum(HOSTS.values())} simulated hosts, {len(trace_jobs)} jobs of {len(TEAMS)} teams "
                f"queued at once and {len(arrivals)} arriving, "
                f"1 predicted s = {scale * 1000:.2f} ms",
                header, rows)
    print(f"\nCSV: {write_csv('scheduler.csv', header, rows)}")
    per_job = []
    held_ms: dict[str, int] = defaultdict(int)
    for h in holds:
        held_ms[h["job"]] += int(h["end_ms"]) - int(h["start_ms"])
    for j in jobs:
        job_id, tier = str(j["job_id"]), executor_pb2.Priority.Name(int(j["priority"]))  # type: ignore[call-overload]
        first = starts[job_id]
        x = shown.get(job_id)
        seen = [round((ms - t0) / 1000, 2) for ms in (*x.now, *x.before)] if x else [""] * 6
        per_job.append([job_id, j["team"], tier.removeprefix("PRIORITY_").lower(), j["gpu_class"],
                        round(float(j["duration_s"]), 1),  # type: ignore[arg-type]
                        round((x.asked_ms - t0) / 1000, 2) if x else "", *seen,
                        round((first - t0) / 1000, 2) if first is not None else "",
                        round(held_ms.get(job_id, 0) / 1000, 2)])
    columns = ["job", "team", "tier", "class", "predicted_s", "asked_s", "expected_start_s", "earliest_s", "latest_s",
               "before_expected_s", "before_earliest_s", "before_latest_s", "first_start_s", "held_s"]
    print(f"per job: {write_csv('scheduler_jobs.csv', columns, per_job)}")


if __name__ == "__main__":
    raise SystemExit(main())

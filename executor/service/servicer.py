"""The executor's use cases over protobuf messages: Submit, Get, List, Cancel, Watch, Fleet, ClearHost, Audit. No
gRPC here. Each takes the caller's Identity (common.identity): a job is seen only by its team and the fleet's
admins (to anyone else it does not exist), submitted and cancelled by submitters, and the fleet's own actions are
admins'."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace

import redis
import structlog
from tunefleet.v1 import executor_pb2, plan_pb2, progress_pb2

from common.identity import UNAUTHENTICATED_ADMIN, Identity, Role
from contract.errors import PlanError
from contract.limits import MAX_STORED_PLAN_BYTES
from contract.paths import is_uri
from contract.run_config import run_config_from_plan
from executor.service import moves, scoping
from executor.service.accounts import Accounts
from executor.service.outputs import check_shared_output
from executor.service.waiting import (
    PLACE_FIELDS,
    RUNNING_FIELDS,
    OrderCache,
    WaitingLine,
    set_expected_start,
)
from executor.service.watch import DEFAULT_HEARTBEAT_INTERVAL_S, Watcher
from fleet import queues, retention
from fleet.audit import AuditLog
from fleet.budget import open_hold_usd
from fleet.connection import FleetRedis, Reachability
from fleet.errors import no_such_job
from fleet.eta import Start
from fleet.event_hub import StreamHub
from fleet.events import EventLog
from fleet.fairshare import FairShare
from fleet.hosts import HostRegistry
from fleet.jobs import (
    DEFAULT_EVENTS_MAX_LEN,
    SUMMARY_FIELDS,
    JobStore,
    NewJob,
    PageCursor,
    decode_page_token,
    encode_page_token,
    job_from_record,
    job_label,
    now_ms,
)
from fleet.ledger import Ledger
from fleet.lifecycle import Lifecycle
from fleet.ordering import TeamShare
from fleet.record import JobRecord
from fleet.recovery import SWEEP_INTERVAL_S, FleetPolicy, Sweeper
from fleet.retention import Quotas
from planner.catalog import Catalog
from planner.classify import plan_gpu_class

log = structlog.get_logger("executor.service.servicer")
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
MAX_REASON_CHARS = 1_000
_LIST_SCAN_BATCH = 200
# Jobs one caller (one token) may keep waiting: a scripted loop cannot fill Redis; a real team queues tens.
DEFAULT_MAX_QUEUED_PER_CALLER = 1_000
# Jobs one team may keep waiting, every member's together.
DEFAULT_MAX_QUEUED_PER_TEAM = 5_000
# Watch streams one caller, and one team, may hold open on one server (each holds a server thread; a server carries
# about 236): a person's terminal and dashboard tabs need a few, a team's platform tens; no one team takes them all.
DEFAULT_MAX_WATCHES_PER_CALLER = 32
DEFAULT_MAX_WATCHES_PER_TEAM = 96
MAX_ALTERNATIVES = 8  # idle classes a Get plans the job for
DEFAULT_AUDIT_ENTRIES = 100
MAX_AUDIT_ENTRIES = 10_000
_LIST_SCAN_LIMIT = 5_000  # records one List call may read while filtering, so a page never costs unbounded work


@dataclass(frozen=True)
class ExecutorConfig:
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S
    events_max_len: int = DEFAULT_EVENTS_MAX_LEN
    policy: FleetPolicy | None = None  # written to the fleet's Redis at start; None keeps the fleet's own
    sweep_interval_s: float = SWEEP_INTERVAL_S
    max_queued_per_caller: int = DEFAULT_MAX_QUEUED_PER_CALLER  # 0: no cap
    max_queued_per_team: int = DEFAULT_MAX_QUEUED_PER_TEAM  # 0: no cap
    max_watches_per_caller: int = DEFAULT_MAX_WATCHES_PER_CALLER  # 0: no cap
    max_watches_per_team: int = DEFAULT_MAX_WATCHES_PER_TEAM  # 0: no cap
    quotas: Quotas = Quotas()  # Submit rates, stored records and their retention (fleet.retention)


class Executor:
    def __init__(self, connection: FleetRedis, catalog: Catalog, config: ExecutorConfig | None = None) -> None:
        self.connection = connection
        self.catalog = catalog
        self.config = config or ExecutorConfig()
        self.store = JobStore(connection)
        self.events = EventLog(connection)
        self.queues = queues.JobQueues(connection)
        self.hosts = HostRegistry(connection)
        self.hub = StreamHub(connection)
        self.sweeper = Sweeper(connection)
        self.lifecycle = Lifecycle(connection)
        self.reachability = Reachability(connection)
        self.audit_log = AuditLog(connection)
        self.accounts = Accounts(Ledger(connection), catalog)
        self.fairshare = FairShare(connection, self.queues)
        self._published_shares: dict[str, TeamShare] | None = None
        self._stopped = threading.Event()
        self._sweeping: threading.Thread | None = None

    def start_sweeping(self) -> None:
        """Store the configured fleet policy, and sweep the fleet in the background (lost hosts, due retries,
        preemption) beside the workers' own sweeps, so recovery does not wait for an idle worker."""
        if self.config.policy is not None:
            self.config.policy.save(self.connection)
        self.publish_shares()
        self._sweeping = threading.Thread(target=self._sweep_loop, name="fleet-sweep", daemon=True)
        self._sweeping.start()
        self.reachability.start()

    def publish_shares(self) -> None:
        """The teams' weights, quotas and borrowing limits from the auth file, for the workers' start order and the
        sweep's reclaims (when they changed)."""
        shares = {name: TeamShare(team.weight, team.quota_gpus, team.borrow_gpus)
                  for name, team in self.accounts.directory().teams.items()}
        if shares != self._published_shares:
            self.fairshare.save_shares(shares)
            self._published_shares = shares

    def _sweep_loop(self) -> None:
        while not self._stopped.wait(self.config.sweep_interval_s):
            try:
                self.publish_shares()
                self.sweeper.sweep()
                self.accounts.stop_over_budget()
                retention.expire_finished(self.connection, self.config.quotas.retention_s, now_ms())
            except redis.RedisError as e:
                log.warning("fleet.sweep_failed", error=str(e))

    def close(self) -> None:
        self._stopped.set()
        if self._sweeping is not None:
            self._sweeping.join(timeout=10)
        self.reachability.close()
        self.hub.close()

    # --- Submit ---------------------------------------------------------------------------------------

    def submit(self, request: executor_pb2.SubmitRequest,
               who: Identity = UNAUTHENTICATED_ADMIN) -> executor_pb2.SubmitResponse:
        who.require(Role.SUBMITTER, "Submit")
        if not request.HasField("plan"):
            raise PlanError("plan", "is missing; send the Plan that 'tunefleet recommend --save-plan' writes")
        plan = request.plan
        plan.DiscardUnknownFields()  # fields this version does not know were never checked: never stored
        if plan.ByteSize() > MAX_STORED_PLAN_BYTES:
            raise PlanError("plan", f"is {plan.ByteSize():,} bytes serialized; the fleet stores at most "
                                    f"{MAX_STORED_PLAN_BYTES:,} per job (a real plan is 2-10 KB): trim "
                                    "prediction notes and suggestions, or model.config_json")
        team = self.accounts.owning_team(who, request.team)
        if not plan.output_uri and plan.hardware.nodes <= 1 and (store := self.accounts.team_store(team)):
            plan.output_uri = f"{store}/{plan.plan_id}"  # the team's default store
        # every check `train` runs first (an object-store output: its local part is the default)
        run_config_from_plan(plan, output_dir=None if is_uri(plan.output_uri) else plan.output_uri or plan.plan_id)
        gpu_class = plan_gpu_class(plan.hardware, self.catalog)
        check_shared_output(plan.output_uri, self.hosts.hosts(gpu_class), plan.hardware.nodes)
        priority = request.priority or executor_pb2.PRIORITY_NORMAL
        if priority not in queues.TIERS:
            raise PlanError("priority", f"unknown priority {priority}; use PRIORITY_HIGH, _NORMAL or _LOW")
        if who.role is not Role.ADMIN:  # the fleet's operators (and a server without identities) are not limited
            retention.check_rate(self.connection, self.config.quotas, who.principal, team, now_ms() / 1000)
        new, priced_note = self._new_job(plan, gpu_class, priority, who, team)
        new = replace(new, scoped_id=scoping.fleet_id(plan.plan_id, team))
        rule, override_note = self.accounts.budget_rule(who, team, new.cost_high_usd, request.override_budget)
        for_team = f" for team {team}" if team != who.team else ""
        job, created = self.lifecycle.submit(new, self.config.max_queued_per_caller, self.config.max_queued_per_team,
                                             self.audit_log, who, note=for_team + override_note + priced_note,
                                             budget=rule, quotas=self.config.quotas)
        return executor_pb2.SubmitResponse(job=scoping.show_job(job, who), created=created)

    def _new_job(self, plan: plan_pb2.Plan, gpu_class: str, priority: int, who: Identity,
                 team: str) -> tuple[NewJob, str]:
        """What the fleet stores for a checked plan of `team`: its queue, size, and the fleet's own prediction, price
        and timeout (executor.service.pricing); and what the audit says of that prediction."""
        gpus_total = (plan.hardware.gpus_per_node or 1) * (plan.hardware.nodes or 1)
        price = self.accounts.job_price(plan, gpu_class, gpus_total)
        return NewJob(plan=plan, queue=queues.QueueRef(gpu_class, priority),
                      gpus=plan.hardware.gpus_per_node or 1, timeout_s=price.timeout_s,
                      events_max_len=self.config.events_max_len, submitter=who.principal, team=team,
                      predicted_s=price.predicted_s, nodes=plan.hardware.nodes or 1,
                      price_usd_per_gpu_hour=price.price_usd_per_gpu_hour,
                      cost_high_usd=price.cost_high_usd), price.note

    # --- Get / List -----------------------------------------------------------------------------------

    def _visible(self, job_id: str, who: Identity, action: str = "") -> tuple[str, JobRecord]:
        """The fleet's id of the job the caller names (executor.service.scoping) and its record; NOT_FOUND when there
        is none, or when it is another team's (its existence is not revealed: the same answer as for an id nobody
        used; an `action` on it is audited as refused)."""
        _require_id(job_id)
        ids = scoping.asked(job_id, who)
        found = [r for r in self.store.read(ids) if r]
        if not found:
            raise no_such_job(job_id)
        record = found[0]
        fleet_id = record.job_id
        if not who.sees(record.team):
            if action:
                self.audit_log.record_denied(who, action, fleet_id, "another team's job (answered NOT_FOUND)")
            raise no_such_job(job_id)
        return fleet_id, record

    def get(self, request: executor_pb2.GetRequest, who: Identity = UNAUTHENTICATED_ADMIN) -> executor_pb2.GetResponse:
        job_id, record = self._visible(request.job_id, who)
        job = job_from_record(record)
        job.open_hold_usd = open_hold_usd(record, now_ms())
        if job.phase == progress_pb2.PHASE_QUEUED:
            hosts = self.hosts.hosts()
            orders = OrderCache(self.fairshare)
            line = self._line(hosts, orders, who)
            place = line.place(record)
            job.pending_reason, job.queue_position = place.reason, place.position
            if place.position:
                set_expected_start(self._start_of(record, line, orders), line.at_ms, job)
            job.runs_now_instead.extend(self._alternatives(job.plan, record.gpu_class, hosts))
        return executor_pb2.GetResponse(job=scoping.show_job(job, who))

    def _alternatives(self, plan: plan_pb2.Plan, own_class: str,
                      hosts: list[executor_pb2.Host]) -> list[executor_pb2.Alternative]:
        """The planner's answer on each other class with an idle healthy host now (moves)."""
        found = []
        for idle in moves.idle_classes(hosts)[:MAX_ALTERNATIVES]:
            if idle.gpu_class == own_class:
                continue
            best = moves.best_on(plan, idle.gpu_class, idle.gpus_per_host, self.accounts.priced_catalog())
            if best is not None:
                found.append(moves.alternative(best))
        return found

    @staticmethod
    def _start_of(record: JobRecord, line: WaitingLine, orders: OrderCache) -> Start | None:
        """When the job is expected to start (the replay of its class); past its queue's window, no earlier than the
        window's last start (a lower bound)."""
        starts = orders.starts(record.gpu_class, line.hosts, line.running)
        if record.job_id in starts:
            return starts[record.job_id]
        latest = max(starts.values(), key=lambda s: s.in_s.mid_s, default=None)
        return Start(latest.in_s, lower_bound=True) if latest else None

    def _running(self, hosts: list[executor_pb2.Host]) -> dict[str, JobRecord | None]:
        running = sorted({h.running_job_id for h in hosts if h.running_job_id})
        return dict(zip(running, self.store.read(running, RUNNING_FIELDS), strict=True))

    def list_jobs(self, request: executor_pb2.ListRequest,
                  who: Identity = UNAUTHENTICATED_ADMIN) -> executor_pb2.ListResponse:
        if request.page_size > MAX_PAGE_SIZE:
            raise PlanError("page_size", f"is {request.page_size}; at most {MAX_PAGE_SIZE}")
        size = request.page_size or DEFAULT_PAGE_SIZE
        phases = set(request.phases)
        cursor = decode_page_token(request.page_token)
        jobs: list[executor_pb2.Job] = []
        scanned = 0
        while len(jobs) < size and scanned < _LIST_SCAN_LIMIT:
            batch = self.store.page(cursor, _LIST_SCAN_BATCH)
            if not batch:
                return executor_pb2.ListResponse(jobs=jobs)
            records = self.store.read([j for j, _ in batch], SUMMARY_FIELDS)
            for (_, ms), record in zip(batch, records, strict=True):
                scanned += 1
                cursor = cursor.past(ms) if cursor else PageCursor(ms, 1)
                if not record:
                    continue
                if phases and record.phase not in phases:
                    continue
                if request.gpu_class and record.gpu_class != request.gpu_class:
                    continue
                if not who.sees(record.team):
                    continue
                listed = job_from_record(record, with_plan=False)
                listed.open_hold_usd = open_hold_usd(record, now_ms())
                jobs.append(scoping.show_job(listed, who))
                if len(jobs) == size:
                    break
        token = encode_page_token(cursor) if cursor and self.store.page(cursor, 1) else ""
        return executor_pb2.ListResponse(jobs=jobs, next_page_token=token)

    # --- Cancel ---------------------------------------------------------------------------------------

    def cancel(self, request: executor_pb2.CancelRequest,
               who: Identity = UNAUTHENTICATED_ADMIN) -> executor_pb2.CancelResponse:
        job_id, _ = self._visible(request.job_id, who, "cancel")
        who.require(Role.SUBMITTER, "Cancel")
        reason = request.reason[:MAX_REASON_CHARS]
        return executor_pb2.CancelResponse(
            job=scoping.show_job(self.lifecycle.cancel(job_id, reason, self.audit_log, who), who))

    # --- Watch ----------------------------------------------------------------------------------------

    def watch(self, request: executor_pb2.WatchRequest, is_active: Callable[[], bool] = lambda: True,
              who: Identity = UNAUTHENTICATED_ADMIN) -> Iterator[executor_pb2.WatchResponse]:
        job_id, _ = self._visible(request.job_id, who)
        watcher = Watcher(self.store, self.events, self.hub, self.config.heartbeat_interval_s, is_active)
        return (_shown_event(response, who) for response in watcher.stream(job_id, request.after_sequence))

    # --- Fleet ----------------------------------------------------------------------------------------

    def fleet(self, request: executor_pb2.FleetRequest,
              who: Identity = UNAUTHENTICATED_ADMIN) -> executor_pb2.FleetResponse:
        """Hosts and queue depths for everyone; the pending jobs of the caller's team (an admin's: all)."""
        hosts = self.hosts.hosts(request.gpu_class)
        depths = self.queues.depths()
        orders = OrderCache(self.fairshare)
        line = self._line(hosts if not request.gpu_class else self.hosts.hosts(), orders, who)
        policy = line.policy
        shown = scoping.show_hosts(hosts, who, line.running)
        response = executor_pb2.FleetResponse(hosts=shown, policy=executor_pb2.FleetPolicy(
            preemption=policy.preemption, retry_limit=policy.retry_limit, retry_backoff_s=policy.retry_backoff_s,
            preempt_min_runtime_s=policy.preempt_min_runtime_s, preempt_checkpoint_s=policy.preempt_checkpoint_s))
        for name, depth in depths.items():
            ref = queues.QueueRef.parse(name)
            if ref is None or (request.gpu_class and ref.gpu_class != request.gpu_class):
                continue
            response.queues.append(executor_pb2.QueueDepth(queue=name, gpu_class=ref.gpu_class,
                                                           priority=ref.priority, depth=depth))  # type: ignore[arg-type]
        # the workers' order: by class, highest tier first
        response.queues.sort(key=lambda q: (q.gpu_class, queues.QueueRef(q.gpu_class, q.priority).tier))
        # (job id, its place in its class's start order): retries first (in no queue yet), then each class's jobs
        # in its start order (fleet.fairshare: within quota first, then tier by tier), at most MAX_PAGE_SIZE a class
        waiting: list[tuple[str, int | None]] = [
            (job_id, None) for job_id in self.sweeper.retrying(MAX_PAGE_SIZE)]
        for gpu_class in dict.fromkeys(q.gpu_class for q in response.queues):
            waiting += [(job_id, i) for i, job_id in enumerate(orders.class_order(gpu_class)[:MAX_PAGE_SIZE])]
        records = self.store.read([job_id for job_id, _ in waiting], PLACE_FIELDS)
        running = line.running
        for (job_id, index), record in zip(waiting, records, strict=True):
            if not record or (request.gpu_class and record.gpu_class != request.gpu_class):
                continue
            place = line.place(record, index)
            start = None
            if index is not None:  # in a queue: the replay of its class
                start = orders.starts(record.gpu_class, line.hosts, running).get(job_id)
            if not who.sees(record.team):
                continue
            pending = executor_pb2.PendingJob(job_id=scoping.shown(job_id, who), queue=record.queue,
                                              reason=place.reason, position=place.position, team=record.team)
            set_expected_start(start, line.at_ms, pending)
            response.pending.append(pending)
        for s in self.fairshare.standings(orders.snapshot()):
            if who.sees(s.team) and (not request.gpu_class or s.gpu_class == request.gpu_class):
                response.teams.append(executor_pb2.TeamStanding(
                    team=s.team, gpu_class=s.gpu_class, held_gpus=s.held_gpus, quota_gpus=s.quota_gpus,
                    limit_gpus=-1 if s.limit_gpus is None else s.limit_gpus, weight=s.weight,
                    usage_gpu_hours=s.usage_gpu_s / 3600))
        return response

    # --- Move -----------------------------------------------------------------------------------------

    def move(self, request: executor_pb2.MoveRequest,
             who: Identity = UNAUTHENTICATED_ADMIN) -> executor_pb2.MoveResponse:
        """Re-plan a queued job for another GPU class — the planner's cheapest fit on one host of it, at the
        fleet's prices — and queue it there, at the back; its data, output and hyperparameters stay."""
        job_id, record = self._visible(request.job_id, who, "move")
        who.require(Role.SUBMITTER, "Move")
        moves.check_movable(record)
        hosts = [h for h in self.hosts.hosts() if not h.quarantine_reason]
        classes = sorted({h.gpu_class for h in hosts})
        if request.gpu_class not in classes:
            raise PlanError("gpu_class", f"{request.gpu_class!r} has no healthy host in the fleet; it has "
                                         f"{', '.join(classes) or 'no hosts'}")
        plan = job_from_record(record).plan
        check_shared_output(plan.output_uri, [h for h in hosts if h.gpu_class == request.gpu_class],
                            plan.hardware.nodes)
        most = max(h.gpu_count for h in hosts if h.gpu_class == request.gpu_class)
        best = moves.best_on(plan, request.gpu_class, most, self.accounts.priced_catalog())
        if best is None:
            raise PlanError("gpu_class", f"the planner finds no way to run this job on one {request.gpu_class} host "
                                         f"of {most} GPU(s) (or its model is a folder only workers read: give the plan "
                                         "a catalog name or config.json)")
        team = record.team
        new, _ = self._new_job(moves.moved(plan, best), request.gpu_class, record.priority, who, team)
        rule, _ = self.accounts.budget_rule(who, team, new.cost_high_usd, override=False)
        e = best.estimate
        message = (f"moved to {new.queue.name} by {who.principal}: {best.fit.hardware.gpus_per_node}x "
                   f"{request.gpu_class}, ~{e.duration_s / 3600:.1f} h, ~${e.cost_usd:,.2f}")
        moved = self.lifecycle.move(job_id, new, message, self.audit_log, who, budget=rule)
        return executor_pb2.MoveResponse(job=scoping.show_job(moved, who))

    def usage(self, request: executor_pb2.UsageRequest,
              who: Identity = UNAUTHENTICATED_ADMIN) -> executor_pb2.UsageResponse:
        return self.accounts.usage(request, who)

    # --- ClearHost ------------------------------------------------------------------------------------

    def clear_host(self, request: executor_pb2.ClearHostRequest,
                   who: Identity = UNAUTHENTICATED_ADMIN) -> executor_pb2.ClearHostResponse:
        who.require(Role.ADMIN, "ClearHost")
        if not request.host_id:
            raise PlanError("host_id", "is empty; name the quarantined host ('tunefleet fleet' lists them)")
        reason = self.hosts.clear(request.host_id)
        self.audit_log.record(who, "clear-host", request.host_id, f"was quarantined: {reason}")
        log.info("host.cleared", host_id=request.host_id, reason=reason, by=who.principal)
        return executor_pb2.ClearHostResponse(quarantine_reason=reason)

    # --- Audit ----------------------------------------------------------------------------------------

    def audit(self, request: executor_pb2.AuditRequest,
              who: Identity = UNAUTHENTICATED_ADMIN) -> executor_pb2.AuditResponse:
        who.require(Role.ADMIN, "Audit")
        if request.limit > MAX_AUDIT_ENTRIES:
            raise PlanError("limit", f"is {request.limit}; at most {MAX_AUDIT_ENTRIES:,}")
        return executor_pb2.AuditResponse(entries=self.audit_log.newest(request.limit or DEFAULT_AUDIT_ENTRIES))

    def _line(self, hosts: list[executor_pb2.Host], orders: OrderCache, who: Identity) -> WaitingLine:
        """The fleet's state that every queued job's place depends on, read once per call; places in the workers'
        start order (fair share across teams within a tier); running jobs named as `who` may read of them."""
        yielding = self.store.yielding_to([h.running_job_id for h in hosts if h.running_job_id])
        running, policy = self._running(hosts), FleetPolicy.load(self.connection)
        orders.use_fleet(hosts, running, policy)
        return WaitingLine(hosts, policy, yielding, orders.index, orders.limit_reason,
                           name_of=self._namer(running, who), running=running)

    @staticmethod
    def _namer(running: Mapping[str, JobRecord | None], who: Identity) -> Callable[[str], str]:
        """How `who` may name the running jobs: by id in their team, else as a job of its team."""
        viewer = None if who.role is Role.ADMIN else who.team
        teams = {job_id: record.team for job_id, record in running.items() if record}
        return lambda job_id: job_label(scoping.shown(job_id, who), teams.get(job_id, ""), viewer)


def _require_id(job_id: str) -> None:
    if not job_id:
        raise PlanError("job_id", "is empty; pass the job id that Submit returned (the plan id)")


def _shown_event(response: executor_pb2.WatchResponse, who: Identity) -> executor_pb2.WatchResponse:
    if response.HasField("event"):
        response.event.job_id = scoping.shown(response.event.job_id, who)
    return response

"""The executor's use cases over protobuf messages: Submit, Get, List, Cancel, Watch, Fleet. No gRPC here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import redis
from tunefleet.v1 import executor_pb2, progress_pb2

from executor import job_queue
from executor.errors import PlanError
from executor.events import EventLog
from executor.hosts import HostRegistry, plan_gpu_class
from executor.progress import TERMINAL_PHASES, new_event
from executor.run_config import run_config_from_plan
from executor.store import (
    DEFAULT_EVENTS_MAX_LEN,
    JOBS_INDEX,
    RUNNING_PHASES,
    JobStore,
    NewJob,
    decode_page_token,
    encode_page_token,
    job_from_record,
    job_key,
    now_ms,
)
from executor.watch import DEFAULT_HEARTBEAT_INTERVAL_S, StreamHub, Watcher
from planner.catalog import Catalog

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
MAX_REASON_CHARS = 1_000
_LIST_SCAN_BATCH = 200
_LIST_SCAN_LIMIT = 5_000  # records one List call may read while filtering, so a page never costs unbounded work


@dataclass(frozen=True)
class ExecutorConfig:
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S
    events_max_len: int = DEFAULT_EVENTS_MAX_LEN


class Executor:
    def __init__(self, connection: redis.Redis, catalog: Catalog, config: ExecutorConfig | None = None) -> None:
        self.redis: Any = connection  # redis-py's stubs type replies as unions of every RESP type
        self.catalog = catalog
        self.config = config or ExecutorConfig()
        self.store = JobStore(connection)
        self.events = EventLog(connection)
        self.queues = job_queue.JobQueues(connection)
        self.hosts = HostRegistry(connection)
        self.hub = StreamHub(connection)

    def close(self) -> None:
        self.hub.close()

    # --- Submit ---------------------------------------------------------------------------------------

    def submit(self, request: executor_pb2.SubmitRequest) -> executor_pb2.SubmitResponse:
        if not request.HasField("plan"):
            raise PlanError("plan", "is missing; send the Plan that 'tunefleet recommend --save-plan' writes")
        plan = request.plan
        run_config_from_plan(plan, output_dir=plan.output_uri or plan.plan_id)  # every check `train` runs first
        gpu_class = plan_gpu_class(plan.hardware, self.catalog)
        priority = request.priority or executor_pb2.PRIORITY_NORMAL
        if priority not in job_queue.TIERS:
            raise PlanError("priority", f"unknown priority {priority}; use PRIORITY_HIGH, _NORMAL or _LOW")
        new = NewJob(plan=plan, priority=priority, queue=job_queue.queue_name(gpu_class, priority),
                     gpu_class=gpu_class, gpus=plan.hardware.gpus_per_node or 1,
                     timeout_s=job_queue.job_timeout_s(plan.prediction.estimate.duration_s),
                     events_max_len=self.config.events_max_len)
        key = job_key(plan.plan_id)
        while True:
            with self.redis.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(key)
                    if pipe.exists(key):
                        pipe.reset()
                        existing = self.store.get(plan.plan_id)
                        if existing.plan.SerializeToString(deterministic=True) != plan.SerializeToString(
                                deterministic=True):
                            raise PlanError("plan.plan_id", f"job {plan.plan_id} already exists with a different "
                                                            "plan; give this plan a new plan_id")
                        return executor_pb2.SubmitResponse(job=existing, created=False)
                    submitted = now_ms()
                    pipe.multi()
                    pipe.hset(key, mapping=new.fields(submitted))
                    pipe.zadd(JOBS_INDEX, {plan.plan_id: submitted})
                    self.events.publish(new_event(plan.plan_id, 1, progress_pb2.PHASE_QUEUED,
                                                  message=f"queued on {new.queue}"), pipeline=pipe)
                    self.queues.enqueue(plan.plan_id, new.queue, new.timeout_s, pipeline=pipe)
                    pipe.execute()
                    return executor_pb2.SubmitResponse(job=self.store.get(plan.plan_id), created=True)
                except redis.WatchError:
                    continue  # created concurrently: answer with that job

    # --- Get / List -----------------------------------------------------------------------------------

    def get(self, request: executor_pb2.GetRequest) -> executor_pb2.GetResponse:
        _require_id(request.job_id)
        return executor_pb2.GetResponse(job=self.store.get(request.job_id))

    def list_jobs(self, request: executor_pb2.ListRequest) -> executor_pb2.ListResponse:
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
            for (job_id, ms), record in zip(batch, self.store.records([j for j, _ in batch]), strict=True):
                scanned += 1
                cursor = (ms, job_id)
                if not record:
                    continue
                if phases and int(record.get(b"phase", b"0")) not in phases:
                    continue
                if request.gpu_class and record.get(b"gpu_class", b"").decode() != request.gpu_class:
                    continue
                jobs.append(job_from_record(job_id, record, with_plan=False))
                if len(jobs) == size:
                    break
        token = encode_page_token(*cursor) if cursor and self.store.page(cursor, 1) else ""
        return executor_pb2.ListResponse(jobs=jobs, next_page_token=token)

    # --- Cancel ---------------------------------------------------------------------------------------

    def cancel(self, request: executor_pb2.CancelRequest) -> executor_pb2.CancelResponse:
        _require_id(request.job_id)
        reason = request.reason[:MAX_REASON_CHARS]
        key = job_key(request.job_id)
        while True:
            with self.redis.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(key)
                    record = pipe.hgetall(key)
                    if not record:
                        self.store.raw(request.job_id)  # raises NOT_FOUND
                    phase = int(record[b"phase"])
                    if phase in TERMINAL_PHASES:
                        pipe.reset()
                        break
                    pipe.multi()
                    if phase == progress_pb2.PHASE_QUEUED:
                        self.queues.remove(request.job_id, record[b"queue"].decode(), pipeline=pipe)
                        self.events.publish(new_event(
                            request.job_id, int(record[b"last_sequence"]) + 1, progress_pb2.PHASE_CANCELLED,
                            message=f"cancelled before it started{': ' + reason if reason else ''}"), pipeline=pipe)
                    elif phase in RUNNING_PHASES:
                        pipe.hset(key, mapping={"cancel_requested": 1, "cancel_reason": reason})
                    pipe.execute()
                    break
                except redis.WatchError:
                    continue
        return executor_pb2.CancelResponse(job=self.store.get(request.job_id))

    # --- Watch ----------------------------------------------------------------------------------------

    def watch(self, request: executor_pb2.WatchRequest,
              is_active: Callable[[], bool] = lambda: True) -> Iterator[executor_pb2.WatchResponse]:
        _require_id(request.job_id)
        watcher = Watcher(self.store, self.events, self.hub, self.config.heartbeat_interval_s, is_active)
        return watcher.stream(request.job_id, request.after_sequence)

    # --- Fleet ----------------------------------------------------------------------------------------

    def fleet(self, request: executor_pb2.FleetRequest) -> executor_pb2.FleetResponse:
        hosts = self.hosts.hosts(request.gpu_class)
        all_hosts = hosts if not request.gpu_class else self.hosts.hosts()
        response = executor_pb2.FleetResponse(hosts=hosts)
        depths = self.queues.depths()
        for name, depth in depths.items():
            parsed = job_queue.parse_queue_name(name)
            if parsed is None or (request.gpu_class and parsed[0] != request.gpu_class):
                continue
            gpu_class, priority = parsed
            response.queues.append(executor_pb2.QueueDepth(queue=name, gpu_class=gpu_class,
                                                           priority=priority, depth=depth))  # type: ignore[arg-type]
            # a worker takes its class's higher tiers first: their jobs are ahead of this queue's
            higher = sum(depths.get(job_queue.queue_name(gpu_class, p), 0) for p in job_queue.TIERS if p < priority)
            for position, job_id in enumerate(self._queued_ids(name)):
                response.pending.append(executor_pb2.PendingJob(
                    job_id=job_id, queue=name, reason=self._pending_reason(gpu_class, higher + position, all_hosts)))
        return response

    def _queued_ids(self, queue: str) -> list[str]:
        return [m.decode() for m in self.redis.lrange(f"rq:queue:{queue}", 0, MAX_PAGE_SIZE - 1)]  # type: ignore

    def _pending_reason(self, gpu_class: str, ahead: int, hosts: list[executor_pb2.Host]) -> str:
        of_class = [h for h in hosts if h.gpu_class == gpu_class]
        if not of_class:
            return f"no registered host has {gpu_class}; start 'tunefleet worker' on one (or re-plan for a class " \
                   f"the fleet has: {', '.join(sorted({h.gpu_class for h in hosts})) or 'none registered'})"
        busy = [h for h in of_class if h.running_job_id]
        if len(busy) == len(of_class):
            return f"all {len(of_class)} {gpu_class} host(s) are busy ({', '.join(h.running_job_id for h in busy)})"
        if ahead:
            return f"{ahead} job(s) of {gpu_class} ahead of it (its queue and higher tiers)"
        return "next in its queue; a free host picks it up within seconds"


def _require_id(job_id: str) -> None:
    if not job_id:
        raise PlanError("job_id", "is empty; pass the job id that Submit returned (the plan id)")

"""The job record: one Redis hash per job (fleet.keys.job_key), every field typed here once. Readers outside fleet/
get a JobRecord (JobStore.record, JobStore.records) and never a field by its bytes. fleet.lifecycle's Submit creates
it with every field (fleet.jobs.NewJob.fields); after that each field is written only by the modules of fleet/ that
WRITERS names for it, each inside its own atomic step, a holder's writes through JobStore's fenced methods only
(tests/executor/test_fleet_units.py holds every write in fleet/ to this table)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields

from tunefleet.v1 import progress_pb2

from fleet.queues import QueueRef


@dataclass(frozen=True)
class JobRecord:
    """A job's record as read (a field not read, or not written yet, has its default)."""

    job_id: str
    schema: str = ""
    plan: bytes = b""  # tunefleet.v1.Plan
    priority: int = 0
    queue: str = ""  # its rq queue's name (QueueRef.name)
    gpu_class: str = ""
    gpus: int = 1  # per node
    nodes: int = 1
    phase: int = 0
    host_id: str = ""
    submitted_at_ms: int = 0
    started_at_ms: int = 0
    finished_at_ms: int = 0
    error: str = ""
    feedback: bytes = b""  # tunefleet.v1.Feedback
    log_path: str = ""
    output_dir: str = ""
    last_event: bytes = b""  # tunefleet.v1.ProgressEvent
    last_sequence: int = 0
    cancel_requested: bool = False
    cancel_reason: str = ""
    events_max_len: int = 0
    timeout_s: int = 0
    submitter: str = ""
    team: str = ""
    predicted_s: float = 0.0
    predicted_low_s: float = 0.0
    predicted_high_s: float = 0.0
    price_usd_per_gpu_hour: float = 0.0
    cost_high_usd: float = 0.0
    spent_usd: float = 0.0
    gpu_seconds: float = 0.0
    lost_gpu_seconds: float = 0.0
    charged_fence: int = 0  # the fence of the last hold charged (fleet.ledger charges each hold once)
    hold_from_step: int = 0
    checkpoint_step: int = 0
    fence: int = 0
    infra_failures: int = 0
    retry_at_ms: int = 0
    retry_reason: str = ""
    retry_kind: str = ""
    gang_attempts: int = 0
    preempt_requested: bool = False
    preempted_for: str = ""
    preempted_for_team: str = ""
    preempt_kind: str = ""
    preempt_deadline_ms: int = 0
    budget_stop: str = ""
    oom_replans: int = 0  # the out-of-memory re-plans it has had (executor.worker.replan)

    @classmethod
    def parse(cls, job_id: str, values: Mapping[bytes, bytes]) -> JobRecord:
        """The record from a hash as Redis returns it (every field, or those read); unknown fields are ignored."""
        record = object.__new__(cls)
        # Set as a frozen dataclass's __init__ would, but only the fields read (the rest keep the class's defaults):
        # the scheduler parses every queued job's record before each dequeue, and __init__ sets all of them one by
        # one through object.__setattr__ (28 us a record against 3 us).
        fields_read = record.__dict__
        fields_read["job_id"] = job_id
        for key, raw in values.items():
            convert = _CONVERTERS.get(key)
            if convert is not None and raw:
                fields_read[key.decode()] = convert(raw)
        return record

    @property
    def queue_ref(self) -> QueueRef | None:
        return QueueRef.parse(self.queue)

    @property
    def total_gpus(self) -> int:
        """GPUs it holds while it runs, every node's."""
        return max(1, self.gpus) * max(1, self.nodes)

    @property
    def predicted(self) -> tuple[float, float, float]:
        """Its predicted duration (s): most likely, shortest, longest (each 0 without a prediction)."""
        mid = self.predicted_s
        return mid, self.predicted_low_s or mid, self.predicted_high_s or mid

    @property
    def last(self) -> progress_pb2.ProgressEvent:
        return progress_pb2.ProgressEvent.FromString(self.last_event)


_CONVERT: dict[str, Callable[[bytes], object]] = {"str": bytes.decode, "bytes": bytes, "int": int, "float": float,
                                                  "bool": lambda v: v == b"1"}
_KINDS = {f.name: str(f.type) for f in fields(JobRecord) if f.name != "job_id"}
_CONVERTERS = {name.encode(): _CONVERT[kind] for name, kind in _KINDS.items()}  # by the hash's field name
FIELDS = tuple(_KINDS)

_SUBMIT = ("schema", "priority", "submitted_at_ms", "events_max_len", "submitter", "team")
# What a Move of a queued job rewrites (fleet.lifecycle): its plan and what Submit derived from it.
MOVED_FIELDS = ("plan", "queue", "gpu_class", "gpus", "nodes", "timeout_s", "predicted_s", "predicted_low_s",
         "predicted_high_s", "price_usd_per_gpu_hour", "cost_high_usd")
# A claim clears the last attempt's requests.
_CLAIM_CLEARS = ("cancel_requested", "preempt_requested", "preempted_for", "preempt_deadline_ms", "retry_at_ms",
                 "budget_stop")
_ASKS_TO_YIELD = ("preempt_requested", "preempted_for", "preempted_for_team", "preempt_kind", "preempt_deadline_ms")
# The fleet modules that write each field after Submit created the record (module names under fleet/; "jobs" is
# JobStore's fenced holder writes: record_output, record_error, record_replan).
WRITERS: dict[str, frozenset[str]] = {name: frozenset(modules) for name, modules in {
    **dict.fromkeys(_SUBMIT, ()),  # set once, by Submit
    **dict.fromkeys(MOVED_FIELDS, ("lifecycle",)),  # Move re-plans a queued job; an out-of-memory re-plan's plan below
    "plan": ("lifecycle", "jobs"),
    "cancel_reason": ("lifecycle",),
    "cancel_requested": ("lifecycle", "leases"),
    "phase": ("leases", "events"),  # a claim (QUEUED -> LOADING), then every event
    "host_id": ("leases", "recovery"), "started_at_ms": ("leases", "recovery"), "fence": ("leases", "recovery"),
    "hold_from_step": ("leases",),
    **dict.fromkeys(_CLAIM_CLEARS[2:], ("leases", "recovery")),
    "preempt_requested": ("leases", "recovery"), "budget_stop": ("leases", "budget"),
    **dict.fromkeys(("last_event", "last_sequence", "feedback", "checkpoint_step", "finished_at_ms"), ("events",)),
    **dict.fromkeys(("infra_failures", "retry_reason", "retry_kind", "gang_attempts", "preempted_for_team",
                     "preempt_kind"), ("recovery",)),
    "error": ("recovery", "jobs"),  # past the retry limit; a holder's run that failed
    **dict.fromkeys(("spent_usd", "gpu_seconds", "lost_gpu_seconds", "charged_fence"), ("ledger",)),
    **dict.fromkeys(("output_dir", "log_path", "oom_replans"), ("jobs",)),
}.items()}


def field_names(*names: str) -> tuple[str, ...]:
    """Names of the record's fields, checked (what a reader reads): a name the record does not have fails at import."""
    unknown = [n for n in names if n not in _KINDS]
    if unknown:
        raise ValueError(f"not fields of the job record: {unknown}")
    return names


def parse_rows(job_ids: Iterable[str], rows: Iterable[Mapping[bytes, bytes]]) -> list[JobRecord | None]:
    """Records read together (JobStore.records): None for a job with no record."""
    return [JobRecord.parse(j, row) if row else None for j, row in zip(job_ids, rows, strict=True)]

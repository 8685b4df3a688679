import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from tunefleet.v1 import plan_pb2 as _plan_pb2
from tunefleet.v1 import progress_pb2 as _progress_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Priority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIORITY_UNSPECIFIED: _ClassVar[Priority]
    PRIORITY_HIGH: _ClassVar[Priority]
    PRIORITY_NORMAL: _ClassVar[Priority]
    PRIORITY_LOW: _ClassVar[Priority]

class UsageGrouping(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    USAGE_GROUPING_UNSPECIFIED: _ClassVar[UsageGrouping]
    USAGE_GROUPING_JOB: _ClassVar[UsageGrouping]
    USAGE_GROUPING_TEAM: _ClassVar[UsageGrouping]
    USAGE_GROUPING_GPU_CLASS: _ClassVar[UsageGrouping]
    USAGE_GROUPING_DAY: _ClassVar[UsageGrouping]
PRIORITY_UNSPECIFIED: Priority
PRIORITY_HIGH: Priority
PRIORITY_NORMAL: Priority
PRIORITY_LOW: Priority
USAGE_GROUPING_UNSPECIFIED: UsageGrouping
USAGE_GROUPING_JOB: UsageGrouping
USAGE_GROUPING_TEAM: UsageGrouping
USAGE_GROUPING_GPU_CLASS: UsageGrouping
USAGE_GROUPING_DAY: UsageGrouping

class Job(_message.Message):
    __slots__ = ("job_id", "plan", "phase", "priority", "queue", "host_id", "submitted_at", "started_at", "finished_at", "last_event", "error", "feedback", "log_path", "output_uri", "pending_reason", "queue_position", "infra_failures", "team", "submitter", "expected_start", "expected_start_earliest", "expected_start_latest", "expected_start_is_lower_bound", "price_usd_per_gpu_hour", "cost_high_usd", "spent_usd", "gpu_seconds", "lost_gpu_seconds", "runs_now_instead", "open_hold_usd", "gpu_class")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    LOG_PATH_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_URI_FIELD_NUMBER: _ClassVar[int]
    PENDING_REASON_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    INFRA_FAILURES_FIELD_NUMBER: _ClassVar[int]
    TEAM_FIELD_NUMBER: _ClassVar[int]
    SUBMITTER_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_START_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_START_EARLIEST_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_START_LATEST_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_START_IS_LOWER_BOUND_FIELD_NUMBER: _ClassVar[int]
    PRICE_USD_PER_GPU_HOUR_FIELD_NUMBER: _ClassVar[int]
    COST_HIGH_USD_FIELD_NUMBER: _ClassVar[int]
    SPENT_USD_FIELD_NUMBER: _ClassVar[int]
    GPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LOST_GPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RUNS_NOW_INSTEAD_FIELD_NUMBER: _ClassVar[int]
    OPEN_HOLD_USD_FIELD_NUMBER: _ClassVar[int]
    GPU_CLASS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    plan: _plan_pb2.Plan
    phase: _progress_pb2.Phase
    priority: Priority
    queue: str
    host_id: str
    submitted_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    last_event: _progress_pb2.ProgressEvent
    error: str
    feedback: _progress_pb2.Feedback
    log_path: str
    output_uri: str
    pending_reason: str
    queue_position: int
    infra_failures: int
    team: str
    submitter: str
    expected_start: _timestamp_pb2.Timestamp
    expected_start_earliest: _timestamp_pb2.Timestamp
    expected_start_latest: _timestamp_pb2.Timestamp
    expected_start_is_lower_bound: bool
    price_usd_per_gpu_hour: float
    cost_high_usd: float
    spent_usd: float
    gpu_seconds: float
    lost_gpu_seconds: float
    runs_now_instead: _containers.RepeatedCompositeFieldContainer[Alternative]
    open_hold_usd: float
    gpu_class: str
    def __init__(self, job_id: _Optional[str] = ..., plan: _Optional[_Union[_plan_pb2.Plan, _Mapping]] = ..., phase: _Optional[_Union[_progress_pb2.Phase, str]] = ..., priority: _Optional[_Union[Priority, str]] = ..., queue: _Optional[str] = ..., host_id: _Optional[str] = ..., submitted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_event: _Optional[_Union[_progress_pb2.ProgressEvent, _Mapping]] = ..., error: _Optional[str] = ..., feedback: _Optional[_Union[_progress_pb2.Feedback, _Mapping]] = ..., log_path: _Optional[str] = ..., output_uri: _Optional[str] = ..., pending_reason: _Optional[str] = ..., queue_position: _Optional[int] = ..., infra_failures: _Optional[int] = ..., team: _Optional[str] = ..., submitter: _Optional[str] = ..., expected_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expected_start_earliest: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expected_start_latest: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expected_start_is_lower_bound: _Optional[bool] = ..., price_usd_per_gpu_hour: _Optional[float] = ..., cost_high_usd: _Optional[float] = ..., spent_usd: _Optional[float] = ..., gpu_seconds: _Optional[float] = ..., lost_gpu_seconds: _Optional[float] = ..., runs_now_instead: _Optional[_Iterable[_Union[Alternative, _Mapping]]] = ..., open_hold_usd: _Optional[float] = ..., gpu_class: _Optional[str] = ...) -> None: ...

class Alternative(_message.Message):
    __slots__ = ("gpu_class", "gpus_per_node", "duration_s", "cost_usd")
    GPU_CLASS_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    gpu_class: str
    gpus_per_node: int
    duration_s: float
    cost_usd: float
    def __init__(self, gpu_class: _Optional[str] = ..., gpus_per_node: _Optional[int] = ..., duration_s: _Optional[float] = ..., cost_usd: _Optional[float] = ...) -> None: ...

class SubmitRequest(_message.Message):
    __slots__ = ("plan", "priority", "override_budget", "team")
    PLAN_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    OVERRIDE_BUDGET_FIELD_NUMBER: _ClassVar[int]
    TEAM_FIELD_NUMBER: _ClassVar[int]
    plan: _plan_pb2.Plan
    priority: Priority
    override_budget: bool
    team: str
    def __init__(self, plan: _Optional[_Union[_plan_pb2.Plan, _Mapping]] = ..., priority: _Optional[_Union[Priority, str]] = ..., override_budget: _Optional[bool] = ..., team: _Optional[str] = ...) -> None: ...

class SubmitResponse(_message.Message):
    __slots__ = ("job", "created")
    JOB_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    job: Job
    created: bool
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("phases", "gpu_class", "page_size", "page_token")
    PHASES_FIELD_NUMBER: _ClassVar[int]
    GPU_CLASS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    phases: _containers.RepeatedScalarFieldContainer[_progress_pb2.Phase]
    gpu_class: str
    page_size: int
    page_token: str
    def __init__(self, phases: _Optional[_Iterable[_Union[_progress_pb2.Phase, str]]] = ..., gpu_class: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("job_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("job_id", "after_sequence")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    after_sequence: int
    def __init__(self, job_id: _Optional[str] = ..., after_sequence: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("time",)
    TIME_FIELD_NUMBER: _ClassVar[int]
    time: _timestamp_pb2.Timestamp
    def __init__(self, time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class HistoryTrimmed(_message.Message):
    __slots__ = ("first_available_sequence",)
    FIRST_AVAILABLE_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    first_available_sequence: int
    def __init__(self, first_available_sequence: _Optional[int] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("event", "heartbeat", "history_trimmed")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    HISTORY_TRIMMED_FIELD_NUMBER: _ClassVar[int]
    event: _progress_pb2.ProgressEvent
    heartbeat: Heartbeat
    history_trimmed: HistoryTrimmed
    def __init__(self, event: _Optional[_Union[_progress_pb2.ProgressEvent, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., history_trimmed: _Optional[_Union[HistoryTrimmed, _Mapping]] = ...) -> None: ...

class FleetRequest(_message.Message):
    __slots__ = ("gpu_class",)
    GPU_CLASS_FIELD_NUMBER: _ClassVar[int]
    gpu_class: str
    def __init__(self, gpu_class: _Optional[str] = ...) -> None: ...

class Host(_message.Message):
    __slots__ = ("host_id", "gpu_class", "gpu_count", "gpu_memory_bytes", "running_job_id", "last_heartbeat", "work_dir", "work_dir_shared", "quarantine_reason", "quarantined_at", "running_team", "checkpoint_store")
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    GPU_CLASS_FIELD_NUMBER: _ClassVar[int]
    GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    RUNNING_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    WORK_DIR_FIELD_NUMBER: _ClassVar[int]
    WORK_DIR_SHARED_FIELD_NUMBER: _ClassVar[int]
    QUARANTINE_REASON_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_AT_FIELD_NUMBER: _ClassVar[int]
    RUNNING_TEAM_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_STORE_FIELD_NUMBER: _ClassVar[int]
    host_id: str
    gpu_class: str
    gpu_count: int
    gpu_memory_bytes: int
    running_job_id: str
    last_heartbeat: _timestamp_pb2.Timestamp
    work_dir: str
    work_dir_shared: bool
    quarantine_reason: str
    quarantined_at: _timestamp_pb2.Timestamp
    running_team: str
    checkpoint_store: str
    def __init__(self, host_id: _Optional[str] = ..., gpu_class: _Optional[str] = ..., gpu_count: _Optional[int] = ..., gpu_memory_bytes: _Optional[int] = ..., running_job_id: _Optional[str] = ..., last_heartbeat: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., work_dir: _Optional[str] = ..., work_dir_shared: _Optional[bool] = ..., quarantine_reason: _Optional[str] = ..., quarantined_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., running_team: _Optional[str] = ..., checkpoint_store: _Optional[str] = ...) -> None: ...

class QueueDepth(_message.Message):
    __slots__ = ("queue", "gpu_class", "priority", "depth")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    GPU_CLASS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    queue: str
    gpu_class: str
    priority: Priority
    depth: int
    def __init__(self, queue: _Optional[str] = ..., gpu_class: _Optional[str] = ..., priority: _Optional[_Union[Priority, str]] = ..., depth: _Optional[int] = ...) -> None: ...

class PendingJob(_message.Message):
    __slots__ = ("job_id", "queue", "reason", "position", "expected_start", "expected_start_earliest", "expected_start_latest", "expected_start_is_lower_bound", "team")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_START_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_START_EARLIEST_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_START_LATEST_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_START_IS_LOWER_BOUND_FIELD_NUMBER: _ClassVar[int]
    TEAM_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    queue: str
    reason: str
    position: int
    expected_start: _timestamp_pb2.Timestamp
    expected_start_earliest: _timestamp_pb2.Timestamp
    expected_start_latest: _timestamp_pb2.Timestamp
    expected_start_is_lower_bound: bool
    team: str
    def __init__(self, job_id: _Optional[str] = ..., queue: _Optional[str] = ..., reason: _Optional[str] = ..., position: _Optional[int] = ..., expected_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expected_start_earliest: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expected_start_latest: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expected_start_is_lower_bound: _Optional[bool] = ..., team: _Optional[str] = ...) -> None: ...

class FleetPolicy(_message.Message):
    __slots__ = ("preemption", "retry_limit", "retry_backoff_s", "preempt_min_runtime_s", "preempt_checkpoint_s")
    PREEMPTION_FIELD_NUMBER: _ClassVar[int]
    RETRY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_S_FIELD_NUMBER: _ClassVar[int]
    PREEMPT_MIN_RUNTIME_S_FIELD_NUMBER: _ClassVar[int]
    PREEMPT_CHECKPOINT_S_FIELD_NUMBER: _ClassVar[int]
    preemption: bool
    retry_limit: int
    retry_backoff_s: float
    preempt_min_runtime_s: float
    preempt_checkpoint_s: float
    def __init__(self, preemption: _Optional[bool] = ..., retry_limit: _Optional[int] = ..., retry_backoff_s: _Optional[float] = ..., preempt_min_runtime_s: _Optional[float] = ..., preempt_checkpoint_s: _Optional[float] = ...) -> None: ...

class TeamStanding(_message.Message):
    __slots__ = ("team", "gpu_class", "held_gpus", "quota_gpus", "limit_gpus", "weight", "usage_gpu_hours")
    TEAM_FIELD_NUMBER: _ClassVar[int]
    GPU_CLASS_FIELD_NUMBER: _ClassVar[int]
    HELD_GPUS_FIELD_NUMBER: _ClassVar[int]
    QUOTA_GPUS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_GPUS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    USAGE_GPU_HOURS_FIELD_NUMBER: _ClassVar[int]
    team: str
    gpu_class: str
    held_gpus: int
    quota_gpus: int
    limit_gpus: int
    weight: float
    usage_gpu_hours: float
    def __init__(self, team: _Optional[str] = ..., gpu_class: _Optional[str] = ..., held_gpus: _Optional[int] = ..., quota_gpus: _Optional[int] = ..., limit_gpus: _Optional[int] = ..., weight: _Optional[float] = ..., usage_gpu_hours: _Optional[float] = ...) -> None: ...

class FleetResponse(_message.Message):
    __slots__ = ("hosts", "queues", "pending", "policy", "teams")
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    TEAMS_FIELD_NUMBER: _ClassVar[int]
    hosts: _containers.RepeatedCompositeFieldContainer[Host]
    queues: _containers.RepeatedCompositeFieldContainer[QueueDepth]
    pending: _containers.RepeatedCompositeFieldContainer[PendingJob]
    policy: FleetPolicy
    teams: _containers.RepeatedCompositeFieldContainer[TeamStanding]
    def __init__(self, hosts: _Optional[_Iterable[_Union[Host, _Mapping]]] = ..., queues: _Optional[_Iterable[_Union[QueueDepth, _Mapping]]] = ..., pending: _Optional[_Iterable[_Union[PendingJob, _Mapping]]] = ..., policy: _Optional[_Union[FleetPolicy, _Mapping]] = ..., teams: _Optional[_Iterable[_Union[TeamStanding, _Mapping]]] = ...) -> None: ...

class ClearHostRequest(_message.Message):
    __slots__ = ("host_id",)
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    host_id: str
    def __init__(self, host_id: _Optional[str] = ...) -> None: ...

class ClearHostResponse(_message.Message):
    __slots__ = ("quarantine_reason",)
    QUARANTINE_REASON_FIELD_NUMBER: _ClassVar[int]
    quarantine_reason: str
    def __init__(self, quarantine_reason: _Optional[str] = ...) -> None: ...

class AuditRequest(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class AuditEntry(_message.Message):
    __slots__ = ("id", "time", "principal", "team", "role", "action", "target", "detail")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    TEAM_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    id: str
    time: _timestamp_pb2.Timestamp
    principal: str
    team: str
    role: str
    action: str
    target: str
    detail: str
    def __init__(self, id: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., principal: _Optional[str] = ..., team: _Optional[str] = ..., role: _Optional[str] = ..., action: _Optional[str] = ..., target: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class AuditResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[AuditEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[AuditEntry, _Mapping]]] = ...) -> None: ...

class UsageRequest(_message.Message):
    __slots__ = ("team", "since_days", "group_by")
    TEAM_FIELD_NUMBER: _ClassVar[int]
    SINCE_DAYS_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    team: str
    since_days: int
    group_by: UsageGrouping
    def __init__(self, team: _Optional[str] = ..., since_days: _Optional[int] = ..., group_by: _Optional[_Union[UsageGrouping, str]] = ...) -> None: ...

class UsageRow(_message.Message):
    __slots__ = ("key", "gpu_seconds", "useful_gpu_seconds", "lost_gpu_seconds", "cost_usd", "holds")
    KEY_FIELD_NUMBER: _ClassVar[int]
    GPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    USEFUL_GPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LOST_GPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    key: str
    gpu_seconds: float
    useful_gpu_seconds: float
    lost_gpu_seconds: float
    cost_usd: float
    holds: int
    def __init__(self, key: _Optional[str] = ..., gpu_seconds: _Optional[float] = ..., useful_gpu_seconds: _Optional[float] = ..., lost_gpu_seconds: _Optional[float] = ..., cost_usd: _Optional[float] = ..., holds: _Optional[int] = ...) -> None: ...

class UsageResponse(_message.Message):
    __slots__ = ("rows", "total", "month_spent_usd", "month_budget_usd", "month_committed_usd")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    MONTH_SPENT_USD_FIELD_NUMBER: _ClassVar[int]
    MONTH_BUDGET_USD_FIELD_NUMBER: _ClassVar[int]
    MONTH_COMMITTED_USD_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[UsageRow]
    total: UsageRow
    month_spent_usd: float
    month_budget_usd: float
    month_committed_usd: float
    def __init__(self, rows: _Optional[_Iterable[_Union[UsageRow, _Mapping]]] = ..., total: _Optional[_Union[UsageRow, _Mapping]] = ..., month_spent_usd: _Optional[float] = ..., month_budget_usd: _Optional[float] = ..., month_committed_usd: _Optional[float] = ...) -> None: ...

class MoveRequest(_message.Message):
    __slots__ = ("job_id", "gpu_class")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    GPU_CLASS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    gpu_class: str
    def __init__(self, job_id: _Optional[str] = ..., gpu_class: _Optional[str] = ...) -> None: ...

class MoveResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("principal", "team", "role")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    TEAM_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    principal: str
    team: str
    role: str
    def __init__(self, principal: _Optional[str] = ..., team: _Optional[str] = ..., role: _Optional[str] = ...) -> None: ...

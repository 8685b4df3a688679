"""Every Redis key of the fleet, in one table. Schema version 1: every key of tunefleet's starts with
`tunefleet:v1:`; rq keeps its own keys (`rq:*`), which only rq reads and writes (fleet.queues uses its API).

    key                                   type    what                                              owner
    tunefleet:v1:job:<job_id>             hash    the job record (fields: fleet.jobs)               fleet.jobs
    tunefleet:v1:jobs                     zset    job ids by submit time (ms), newest last; List    fleet.jobs
    tunefleet:v1:events:<job_id>          stream  progress events, entry id "<sequence>-0", field   fleet.events
                                                  "e" = ProgressEvent bytes; expires
                                                  EVENTS_RETENTION_S after the job ends
    tunefleet:v1:hub:<id>                 stream  one Watch fan-out's wake-up stream; expires       fleet.event_hub
    tunefleet:v1:lease:<job_id>           string  "<host_id>:<fence>" of the job's holder; expires  fleet.leases
                                                  unless renewed
    tunefleet:v1:running                  set     job ids holding a lease; swept for lost hosts     fleet.leases
    tunefleet:v1:retrying                 zset    job ids waiting out a retry backoff, by when      fleet.recovery
                                                  they requeue (ms)
    tunefleet:v1:policy                   hash    the fleet's policy (FleetPolicy)                  fleet.recovery
    tunefleet:v1:host:<host_id>           hash    a registered worker host; expires without         fleet.hosts
                                                  heartbeats
    tunefleet:v1:hosts                    zset    host ids by last heartbeat (s)                    fleet.hosts
    tunefleet:v1:quarantine:<host_id>     hash    why a host takes no work (reason, since_s), set by  fleet.hosts
                                                  its worker's GPU health check; deleted by an
                                                  admin's ClearHost, else expires after 30 days
    tunefleet:v1:gang:<job_id>            hash    a multi-node job's gang (fields: fleet.gangs)     fleet.gangs
    tunefleet:v1:gang:<job_id>:node:<k>   string  "<host_id>:<fence>" while member k lives          fleet.gangs
    tunefleet:v1:submitter:<owner>        set     job ids an owner ("principal:<name>" or           fleet.lifecycle
                                                  "team:<name>") submitted that may still be queued
                                                  (pruned when counted); the per-caller and per-team
                                                  caps
    tunefleet:v1:audit                    stream  who did what: Cancel, ClearHost, Submit (capped)  fleet.audit
    tunefleet:v1:ledger                   stream  one entry per charged hold (capped)               fleet.ledger
    tunefleet:v1:spend:<YYYY-MM>          hash    "<team>:usd|gpu_s|lost_gpu_s" -> the month's      fleet.ledger
                                                  totals
    tunefleet:v1:team-jobs:<team>         set     a team's jobs that may not have ended (pruned     fleet.budget
                                                  when read): what it has committed
    tunefleet:v1:finished                 zset    job ids by when they finished (ms); records past  fleet.retention
                                                  the retention are deleted
    tunefleet:v1:team-records:<team>      hash    job id -> stored bytes of each of the team's      fleet.retention
                                                  records (the per-team cap)
    tunefleet:v1:team-bytes               hash    team -> its records' bytes                        fleet.retention
    tunefleet:v1:rate:<owner>:<minute>    string  Submits of an owner ("principal:<name>" or         fleet.retention
                                                  "team:<name>") in one minute; expires
    tunefleet:v1:team-shares              hash    team -> {"weight": w} from the identities file    fleet.fairshare
    tunefleet:v1:usage                    hash    "<team>:gpu_s|at_s": each team's decaying usage   fleet.fairshare
    tunefleet:v1:hold-model               hash    "<class>:n|x|y|xx|xy": decayed sums of its        fleet.ledger
                                                  complete runs' (predicted, held) seconds
    rq:queue:tunefleet.<class>.<tier>     list    rq's queues, one per GPU class and tier           fleet.queues
"""

from __future__ import annotations

PREFIX = "tunefleet:v1:"
JOBS_INDEX = PREFIX + "jobs"
RUNNING_SET = PREFIX + "running"
RETRYING = PREFIX + "retrying"
POLICY = PREFIX + "policy"
HOSTS_INDEX = PREFIX + "hosts"
AUDIT_STREAM = PREFIX + "audit"
# A counter each durable acknowledgement bumps, so WAIT has a write of its own to wait for (fleet.durability).
DURABLE_MARK = PREFIX + "durable-mark"
LEDGER_STREAM = PREFIX + "ledger"
TEAM_SHARES = PREFIX + "team-shares"
USAGE = PREFIX + "usage"
HOLD_MODEL = PREFIX + "hold-model"
FINISHED = PREFIX + "finished"
TEAM_BYTES = PREFIX + "team-bytes"


def job_key(job_id: str) -> str:
    return f"{PREFIX}job:{job_id}"


def events_key(job_id: str) -> str:
    return f"{PREFIX}events:{job_id}"


def hub_key(hub_id: str) -> str:
    return f"{PREFIX}hub:{hub_id}"


def lease_key(job_id: str) -> str:
    return f"{PREFIX}lease:{job_id}"


def host_key(host_id: str) -> str:
    return f"{PREFIX}host:{host_id}"


def quarantine_key(host_id: str) -> str:
    return f"{PREFIX}quarantine:{host_id}"


def gang_key(job_id: str) -> str:
    return f"{PREFIX}gang:{job_id}"


def member_key(job_id: str, node_rank: int) -> str:
    return f"{PREFIX}gang:{job_id}:node:{node_rank}"


def submitter_key(submitter: str) -> str:
    return f"{PREFIX}submitter:{submitter}"


def spend_key(month: str) -> str:
    return f"{PREFIX}spend:{month}"


def team_jobs_key(team: str) -> str:
    return f"{PREFIX}team-jobs:{team}"


def team_records_key(team: str) -> str:
    return f"{PREFIX}team-records:{team}"


def rate_key(owner: str, window: int) -> str:
    return f"{PREFIX}rate:{owner}:{window}"

"""Job ids scoped per team: two teams may both submit a plan `exp-1`, and neither learns of the other's.

Everyone names their own team's jobs by their plan ids. In the fleet (Redis, rq, workers, events) a job of a team is
its plan id and its team's mark (fleet.jobs.team_mark: '-t' and 6 hex of the team's SHA-256; rq admits letters,
digits, '_' and '-' only), so two teams' ids never meet; the service strips the caller's team's mark from what it
answers and adds it to what the caller asks for. A fleet's admins see every team's jobs: other teams' by their fleet
ids, which they name them by. The team of a fleet without identities ("default") has no mark: its job ids are its
plan ids, as they always were."""

from __future__ import annotations

from collections.abc import Mapping

from tunefleet.v1 import executor_pb2

from common.identity import Identity, Role
from contract.errors import PlanError
from contract.run_config import MAX_PLAN_ID_CHARS
from fleet.jobs import team_mark, within_team
from fleet.record import JobRecord


def fleet_id(plan_id: str, team: str) -> str:
    """The fleet's id of team `team`'s job of this plan id; PlanError when it would be longer than a plan id may be
    (the run takes it as its plan id: contract.run_config)."""
    scoped = plan_id + team_mark(team)
    if len(scoped) > MAX_PLAN_ID_CHARS:
        raise PlanError("plan.plan_id", f"is {len(plan_id)} characters; on a fleet of teams a plan id may have at most "
                                        f"{MAX_PLAN_ID_CHARS - len(team_mark(team))} (the fleet adds its team's mark)")
    return scoped


def asked(job_id: str, who: Identity) -> list[str]:
    """The fleet ids the job a caller names may have, to look up in order: a member's is its own team's plan id; an
    admin's, its own team's plan id, else a fleet id as it sees other teams' jobs."""
    own = fleet_id(job_id, who.team) if len(job_id) + len(team_mark(who.team)) <= MAX_PLAN_ID_CHARS else job_id
    return list(dict.fromkeys([own, job_id])) if who.role is Role.ADMIN else [own]


def shown(job_id: str, who: Identity) -> str:
    """A fleet id as the caller names it: its own team's job by its plan id, another team's (an admin's view) by its
    fleet id."""
    return within_team(job_id, who.team)


def show_job(job: executor_pb2.Job, who: Identity) -> executor_pb2.Job:
    """The job with its ids (its own and its last event's) as the caller names them."""
    job.job_id = shown(job.job_id, who)
    if job.HasField("last_event"):
        job.last_event.job_id = shown(job.last_event.job_id, who)
    return job


def show_hosts(hosts: list[executor_pb2.Host], who: Identity,
               running: Mapping[str, JobRecord | None]) -> list[executor_pb2.Host]:
    """The hosts as `who` may see them: each busy one's team (from its running job's record, `running`), and its job's
    id, as the caller names it, only where the caller sees that team."""
    teams = {job_id: record.team for job_id, record in running.items() if record}
    out = []
    for host in hosts:
        copy = executor_pb2.Host()
        copy.CopyFrom(host)
        if host.running_job_id:
            copy.running_team = teams.get(host.running_job_id, "")
            copy.running_job_id = shown(host.running_job_id, who) if who.sees(copy.running_team) else ""
        out.append(copy)
    return out

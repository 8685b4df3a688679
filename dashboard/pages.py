"""The fleet's pages: Jobs (newest first, filtered, a page of the executor's List at a time), a Job (its plan in
words, live curves fed by Server-Sent Events, checkpoints, events, predicted against measured, Cancel for those who
may), and the Fleet (hosts by class, queues, why each pending job waits, utilisation over the last hours)."""

from __future__ import annotations

import time
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from tunefleet.v1 import executor_pb2

from clients.fleet_render import expected_start, feedback_text, phase_name, priority_name
from common.bounds import parse_count
from dashboard import present
from dashboard.live import job_events
from dashboard.sessions import Session
from dashboard.web import Dashboard, checked_form, page

# Jobs per page of the Jobs table (the executor's List pages; 2,000 jobs are 40 pages, each one List call).
JOBS_PAGE_SIZE = 50
# Events the Job page's log lists when it is first drawn (the live stream adds the rest).
LOG_EVENTS = 200
# How often an open Fleet page draws itself again (seconds).
FLEET_REFRESH_S = 10


async def jobs(dash: Dashboard, request: Request, session: Session) -> Response:
    q = request.query_params
    phase = present.phase_value(q.get("phase", ""))
    gpu_class = q.get("gpu_class", "").strip()
    token = q.get("page", "")
    client = dash.backends.executor(session.token)
    listing = await run_in_threadpool(client.list_jobs, [phase] if phase else None, gpu_class, JOBS_PAGE_SIZE, token)
    return dash.render(request, "jobs.html", rows=[present.job_row(j) for j in listing.jobs],
                       next_page=listing.next_page_token, phases=present.PHASES, phase=q.get("phase", ""),
                       gpu_class=gpu_class, first_page=not token)


async def job(dash: Dashboard, request: Request, session: Session) -> Response:
    job_id = request.path_params["job_id"]
    client = dash.backends.executor(session.token)
    found: executor_pb2.Job = await run_in_threadpool(client.get, job_id)
    fit, estimate = found.plan.prediction.fit, found.plan.prediction.estimate
    segments, capacity_pct, low_pct, high_pct = present.breakdown(fit) if fit.per_gpu.total_bytes else ([], 0, 0, 0)
    return dash.render(
        request, "job.html", job=found, row=present.job_row(found), words=present.plan_words(found.plan),
        phase=phase_name(found.phase), priority=priority_name(found.priority), waiting=expected_start(found),
        terminal=found.phase in present.TERMINAL, feedback=feedback_text([found]) if found.feedback.nodes else "",
        segments=segments, capacity_pct=capacity_pct, low_pct=low_pct, high_pct=high_pct, fit=fit,
        estimate=estimate, size=present.size, usd=present.usd, duration=present.duration,
        job_json=present.script_json(present.job_json(found)),
        can_cancel=session.can_act and found.phase not in present.TERMINAL)


async def job_facts(dash: Dashboard, request: Request, session: Session) -> Response:
    """The job page's header as it stands now, as JSON (its script fetches it whenever the job's phase changes)."""
    found: executor_pb2.Job = await run_in_threadpool(dash.backends.executor(session.token).get,
                                                      request.path_params["job_id"])
    return JSONResponse(present.job_facts(found), headers={"cache-control": "no-store"})


async def job_stream(dash: Dashboard, request: Request, session: Session) -> Response:
    """The job's events as SSE: from Last-Event-ID (a browser reconnecting), else ?after=N, else from the start."""
    raw = request.headers.get("last-event-id") or request.query_params.get("after", "0")
    after = parse_count(raw) or 0
    stream = job_events(dash.backends.watch_stub(), session.token, request.path_params["job_id"], after)
    return StreamingResponse(stream, media_type="text/event-stream",
                             headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


async def cancel(dash: Dashboard, request: Request, session: Session) -> Response:
    form = await checked_form(request, session)
    if form is None:
        return PlainTextResponse("refused: the form did not come from this dashboard (CSRF check)", status_code=403)
    job_id = request.path_params["job_id"]
    client = dash.backends.executor(session.token)
    await run_in_threadpool(client.cancel, job_id, f"cancelled from the dashboard by {session.principal}")
    return RedirectResponse(f"{request.scope.get('root_path', '')}/jobs/{job_id}", status_code=303)


def _host_rows(response: executor_pb2.FleetResponse, now_s: float) -> dict[str, list[dict[str, Any]]]:
    by_class: dict[str, list[dict[str, Any]]] = {}
    for h in sorted(response.hosts, key=lambda h: (h.gpu_class, h.host_id)):
        state = "quarantined" if h.quarantine_reason else "busy" if h.running_job_id or h.running_team else "idle"
        age = max(0.0, now_s - h.last_heartbeat.ToMilliseconds() / 1000) if h.last_heartbeat.seconds else None
        by_class.setdefault(h.gpu_class, []).append({
            "host_id": h.host_id, "state": state, "job": h.running_job_id, "team": h.running_team,
            "gpus": h.gpu_count,
            "memory": present.size(h.gpu_memory_bytes) if h.gpu_memory_bytes else "-",
            "heartbeat": f"{age:.0f} s ago" if age is not None else "-", "reason": h.quarantine_reason})
    return by_class


async def fleet(dash: Dashboard, request: Request, session: Session) -> Response:
    client = dash.backends.executor(session.token)
    response: executor_pb2.FleetResponse = await run_in_threadpool(client.fleet)
    dash.utilisation.record(response)
    pending = [{"job_id": p.job_id, "team": p.team or "-", "queue": p.queue, "position": p.position or "-",
                "reason": p.reason, "start": expected_start(p)} for p in response.pending]
    queues = [{"gpu_class": q.gpu_class, "tier": priority_name(q.priority), "depth": q.depth} for q in response.queues]
    teams = [{"team": t.team or "-", "gpu_class": t.gpu_class, "held": t.held_gpus, "quota": t.quota_gpus,
              "limit": "none" if t.limit_gpus < 0 else t.limit_gpus, "weight": f"{t.weight:g}",
              "usage": f"{t.usage_gpu_hours:,.2f}"} for t in response.teams]
    return dash.render(request, "fleet.html", hosts=_host_rows(response, time.time()), queues=queues, pending=pending,
                       teams=teams,
                       policy=response.policy, refresh_s=FLEET_REFRESH_S,
                       utilisation_json=present.script_json(dash.utilisation.series()))


ROUTES = [Route("/jobs", page(jobs)), Route("/jobs/{job_id}", page(job)),
          Route("/jobs/{job_id}/events", page(job_stream)), Route("/jobs/{job_id}/facts", page(job_facts)),
          Route("/jobs/{job_id}/cancel", page(cancel), methods=["POST"]), Route("/fleet", page(fleet))]

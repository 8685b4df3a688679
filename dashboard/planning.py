"""The Plan page: a form whose fields are the CLI's flags, parsed by the CLI's own parsers and turned into requests
by the CLI's own builders (clients.planning_args), so a page's answer is the one `tunefleet fit --json` or `tunefleet
recommend` prints for the same question. Fit draws the per-GPU breakdown as a stacked bar against the GPU's
capacity with the likely range; Recommend lists the candidates with their Pareto chart of cost against time, saves
the winning plan as JSON, or submits it (with a dataset on the fleet's storage) to the executor. It opens no file of
its own host: a model is a catalog name, a dataset a path on the fleet's storage that the workers check."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from tunefleet.v1 import planner_pb2

from clients import planning_args
from clients.arguments import BadInputError
from clients.errors import InvalidArgument
from dashboard import present
from dashboard.sessions import Session
from dashboard.web import Dashboard, checked_form, page

# The form's fields, each the CLI flag it stands for (the values are parsed as the CLI parses that flag).
FIELDS = {"model": "--model", "method": "--method", "gpu": "--gpu", "gpus": "--gpus", "micro_batch": "--micro-batch",
          "seq_len": "--seq-len", "grad_accum": "--grad-accum", "zero": "--zero", "offload": "--offload",
          "tokens": "--tokens", "dataset": "--dataset", "budget": "--budget", "margin": "--margin"}
DEFAULTS = {"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "gpu": "rtx-4090", "gpus": "1",
            "micro_batch": "1", "seq_len": "2048", "grad_accum": "1", "zero": "", "offload": "none",
            "tokens": "10M", "dataset": "", "budget": "", "grad_ckpt": "on", "margin": ""}
FIT_ONLY = ("gpu", "gpus", "zero", "offload", "margin")
RECOMMEND_ONLY = ("tokens", "dataset", "budget")
RECOMMEND_LIMIT = 10


class FormParser(argparse.ArgumentParser):
    """The CLI's parser, raising on a bad value (naming the flag) instead of exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadInputError(message)


def _argv(command: str, values: Mapping[str, str]) -> list[str]:
    skip = RECOMMEND_ONLY if command == "fit" else FIT_ONLY
    argv = []
    for name, flag in FIELDS.items():
        value = values.get(name, "").strip()
        if value and name not in skip:
            argv += [flag, value]
    if values.get("grad_ckpt", "on") != "on":
        argv.append("--no-grad-ckpt")
    if command == "recommend":
        argv += ["--limit", str(RECOMMEND_LIMIT)]
    return argv


def parse(command: str, values: Mapping[str, str]) -> argparse.Namespace:
    """The CLI's namespace for the form's values; InvalidArgument naming the field when one is wrong."""
    try:
        return planning_args.form_parser(command, FormParser).parse_args(_argv(command, values))
    except BadInputError as exc:
        raise InvalidArgument(f"{exc} — change that field of the form") from exc


def _values(query: Mapping[str, str]) -> dict[str, str]:
    return {name: query.get(name, default) for name, default in DEFAULTS.items()}


def _candidates(rec: planner_pb2.RecommendResponse) -> list[dict[str, Any]]:
    rows = []
    for i, c in enumerate(rec.candidates, 1):
        hw, t, e = c.fit.hardware, c.training, c.estimate
        rows.append({"rank": i, "hardware": f"{hw.gpus_per_node * hw.nodes}× {hw.gpu.name}"
                     + (f" [{hw.flavor}]" if hw.flavor else ""), "method": present.method_name(t.method),
                     "zero": t.zero_stage,
                     "ckpt": "on" if t.gradient_checkpointing else "off", "micro_batch": t.micro_batch_size,
                     "per_gpu": present.size(c.fit.per_gpu.total_bytes), "hours": e.duration_s / 3600,
                     "time": present.duration(e.duration_s), "cost_usd": e.cost_usd, "cost": present.usd(e.cost_usd),
                     "pareto": c.pareto_optimal})
    return rows


async def plan(dash: Dashboard, request: Request, session: Session) -> Response:
    values = _values(request.query_params)
    action = request.query_params.get("action", "")
    planner = dash.backends.planner(session.token)
    models, hardware = await run_in_threadpool(lambda: (planner.list_models(), planner.list_hardware()))
    context: dict[str, Any] = {"values": values, "action": action, "methods": list(planning_args.METHODS),
                               "offloads": list(planning_args.OFFLOADS), "models": [m.name for m in models.models],
                               "gpus": [g.name for g in hardware.gpus], "fit": None, "rec": None, "error": ""}
    try:
        if action == "fit":
            question_fit = planning_args.fit_request(parse("fit", values), local_files=False)
            fit = (await run_in_threadpool(planner.fit, question_fit)).result
            segments, capacity_pct, low_pct, high_pct = present.breakdown(fit)
            context.update(fit=fit, segments=segments, capacity_pct=capacity_pct, low_pct=low_pct, high_pct=high_pct,
                           size=present.size)
        elif action == "recommend":
            question = planning_args.recommend_request(parse("recommend", values), local_files=False)
            rec = await run_in_threadpool(planner.recommend, question)
            rows = _candidates(rec)
            context.update(rec=rec, rows=rows, pareto_json=present.script_json(
                [{"hours": r["hours"], "cost_usd": r["cost_usd"], "pareto": r["pareto"]} for r in rows]))
    except (InvalidArgument, BadInputError) as exc:
        context["error"] = str(exc)
    return dash.render(request, "plan.html", status_code=400 if context["error"] else 200, **context)


async def plan_json(dash: Dashboard, request: Request, session: Session) -> Response:
    """The recommended plan as a file: `tunefleet submit plan.json` or `tunefleet train plan.json` run it."""
    planner = dash.backends.planner(session.token)
    rec = await run_in_threadpool(planner.recommend, planning_args.recommend_request(
        parse("recommend", _values(request.query_params)), local_files=False))
    if not rec.HasField("plan"):
        return PlainTextResponse("no option meets the constraints; see the Plan page for why", status_code=409)
    return Response(json_format.MessageToJson(rec.plan), media_type="application/json",
                    headers={"content-disposition": f'attachment; filename="{rec.plan.plan_id}.json"'})


async def submit(dash: Dashboard, request: Request, session: Session) -> Response:
    form = await checked_form(request, session)
    if form is None:
        return PlainTextResponse("refused: the form did not come from this dashboard (CSRF check)", status_code=403)
    values = _values(form)
    if not values["dataset"]:
        raise InvalidArgument("dataset: a submitted plan needs its training data (a JSONL file on the fleet's "
                              "storage, or a Hugging Face dataset name)")
    planner = dash.backends.planner(session.token)
    rec = await run_in_threadpool(planner.recommend, planning_args.recommend_request(parse("recommend", values),
                                                                                    local_files=False))
    if not rec.HasField("plan"):
        raise InvalidArgument("no option meets the constraints; recommend with the same fields to see why")
    job = (await run_in_threadpool(dash.backends.executor(session.token).submit, rec.plan)).job
    return RedirectResponse(f"{request.scope.get('root_path', '')}/jobs/{job.job_id}", status_code=303)


ROUTES = [Route("/plan", page(plan)), Route("/plan/plan.json", page(plan_json)),
          Route("/plan/submit", page(submit), methods=["POST"])]

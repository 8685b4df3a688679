"""The `tunefleet` command line: plan fine-tuning jobs before renting a GPU.

With no --address (or TUNEFLEET_PLANNER) it plans in this process; with one it calls the
PlannerService over gRPC. Results print as tables, or as JSON with --json.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from google.protobuf import json_format
from tunefleet.v1 import plan_pb2, planner_pb2

from clients import connection, fleet_cli, health, render
from clients.arguments import BadInputError, model_ref
from clients.errors import InvalidArgument, TunefleetError, Unavailable
from clients.planner_client import PlannerClient
from clients.planning_args import (
    add_job_args,
    add_margin_arg,
    add_recommend_args,
    add_workload_args,
    fit_request,
    hardware_spec,
    oom_policy,
    recommend_request,
    training_spec,
    workload_spec,
)
from common import exit_status

EXAMPLES = """examples:
  tunefleet fit --model meta-llama/Llama-3.1-8B --method qlora --gpu rtx-4090 --micro-batch 1 --seq-len 2048
  tunefleet fit --model ./my-model/config.json --method full --gpu a100-80gb --gpus 4 --zero 3 --json
  tunefleet estimate --model Qwen/Qwen2.5-7B --method lora --flavor a10g-large --tokens 10M
  tunefleet recommend --model meta-llama/Llama-3.1-70B --method qlora --tokens 50M --budget 200
  tunefleet fit --model meta-llama/Llama-3.1-70B --gpu h100-sxm-80gb --gpus 8 --zero 3 \\
                --recipe hf-trainer --sharding fsdp    # your Trainer script under accelerate's FSDP
  tunefleet hardware
  tunefleet models
  tunefleet submit plan.json --watch          # run a plan on the fleet and follow it
  tunefleet jobs --feedback --json            # measured vs predicted, for calibration
"""
CALIBRATION_ENV = "TUNEFLEET_CALIBRATION"


def _add_client_args(p: argparse.ArgumentParser) -> None:
    c = p.add_argument_group("output and server")
    c.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    c.add_argument("--address", default=os.environ.get("TUNEFLEET_PLANNER", ""),
                   help="planner host:port (env TUNEFLEET_PLANNER); empty plans in-process")
    c.add_argument("--calibration", type=Path, default=os.environ.get(CALIBRATION_ENV) or None,
                   help="in-process: plan with the fleet's own runs ('tunefleet calibrate --out FILE'; env "
                        f"{CALIBRATION_ENV}); a planner service takes it with 'serve planner --calibration'")
    connection.add_arguments(c)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tunefleet", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=exit_status.HELP + EXAMPLES)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fit = sub.add_parser("fit", help="will it fit: per-GPU and host memory, term by term",
                         description="Predict peak memory per GPU and per node, the largest micro-batch that fits, "
                                     "and what to change when it does not fit.", epilog=exit_status.HELP + EXAMPLES,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_job_args(fit)
    add_margin_arg(fit)
    fit.add_argument("--inference", action="store_true",
                     help="size serving instead of training: weights, the KV cache of --micro-batch sequences of "
                          "--seq-len tokens, and the prefill (--method qlora / lora-8bit: 4- / 8-bit weights)")
    _add_client_args(fit)
    est = sub.add_parser("estimate", help="how long and how much money",
                         description="Fit, plus step time, wall time, GPU-hours and cost as a range.",
                         epilog=exit_status.HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_job_args(est)
    add_margin_arg(est)
    add_workload_args(est)
    _add_client_args(est)
    rec = sub.add_parser("recommend", help="the cheapest (or fastest) hardware that runs the job",
                         description="Search every catalog GPU and flavor x GPU count x ZeRO x offload x "
                                     "checkpointing x micro-batch; print ranked options, why the rest were "
                                     "rejected, and an executable plan (with --json).")
    add_job_args(rec, hardware=False)
    add_workload_args(rec)
    add_recommend_args(rec)
    _add_client_args(rec)
    hw = sub.add_parser("hardware", help="list GPU classes and provider flavors with prices")
    hw.add_argument("--provider", default="")
    _add_client_args(hw)
    mo = sub.add_parser("models", help="list catalog models with parameter counts")
    _add_client_args(mo)
    tr = sub.add_parser("train", help="run a plan on this host with DeepSpeed (needs the 'train' extra)",
                        add_help=False)
    tr.add_argument("rest", nargs=argparse.REMAINDER, help="the plan and options of the run (tunefleet train --help)")
    fleet_cli.add_commands(sub)
    wk = sub.add_parser("worker", help="run a fleet worker on this host (needs the 'queue' and 'train' extras)",
                        add_help=False)
    wk.add_argument("rest", nargs=argparse.REMAINDER, help="options of the worker (tunefleet worker --help)")
    health.add_command(sub)
    serve = sub.add_parser("serve", help="run a service: 'tunefleet serve planner', 'tunefleet serve executor' or "
                                         "'tunefleet serve dashboard'")
    serve.add_argument("service", choices=["planner", "executor", "dashboard"])
    serve.add_argument("rest", nargs=argparse.REMAINDER, help="options passed to the service (see --help there)")
    return parser


def _planner(a: argparse.Namespace) -> PlannerClient:
    c = connection.from_arguments(a, a.address)
    return PlannerClient(a.address or None, token=c.token, tls_ca=c.tls_ca, tls_server_name=c.tls_server_name,
                         calibration=a.calibration)


def recommended_plan(argv: list[str]) -> plan_pb2.Plan:
    """The plan `tunefleet recommend ARGV` would save: for `tunefleet submit --from-recommend ARGV`."""
    a = build_parser().parse_args(["recommend", *argv])
    with _planner(a) as client:
        rec = client.recommend(recommend_request(a))
    if not rec.HasField("plan"):
        raise SystemExit("error: --from-recommend: no option meets the constraints; run 'tunefleet recommend' with "
                         "the same options to see why each was rejected")
    return rec.plan


def run(a: argparse.Namespace, client: PlannerClient) -> tuple[str, int]:
    """The command's output and its exit status."""
    if a.command == "fit":
        fit_resp = client.fit(fit_request(a))
        text = render.dumps(fit_resp.result) if a.json else render.fit_text(fit_resp.result)
        return text, exit_status.OK if fit_resp.result.fits else exit_status.DOES_NOT_FIT
    if a.command == "estimate":
        est = client.estimate(planner_pb2.EstimateRequest(model=model_ref(a.model), training=training_spec(a),
                                                          hardware=hardware_spec(a), workload=workload_spec(a),
                                                          margin_fraction=a.margin))
        return (render.dumps(est) if a.json else render.estimate_text(est)), \
            exit_status.OK if est.fit.fits else exit_status.DOES_NOT_FIT
    return _listing(a, client), exit_status.OK


def _listing(a: argparse.Namespace, client: PlannerClient) -> str:
    if a.command == "recommend":
        rec = client.recommend(recommend_request(a))
        text = render.dumps(rec) if a.json else render.recommend_text(rec)
        if a.save_plan and rec.HasField("plan"):
            rec.plan.on_oom.CopyFrom(oom_policy(a))
            rec.plan.hyperparameters.deterministic = a.deterministic
            a.save_plan.write_text(json_format.MessageToJson(rec.plan))
            text += "" if a.json else f"\nplan written to {a.save_plan}; run it with: tunefleet train {a.save_plan}"
        return text
    if a.command == "hardware":
        hw = client.list_hardware(planner_pb2.ListHardwareRequest(provider=a.provider))
        return render.dumps(hw) if a.json else render.hardware_text(hw)
    models = client.list_models()
    return render.dumps(models) if a.json else render.models_text(models)


def main(argv: list[str] | None = None) -> int:
    """The client commands of `tunefleet` (launch.command hands it every command but worker, train and serve)."""
    args = build_parser().parse_args(argv)
    try:
        return _run_command(args)
    except BadInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_status.BAD_INPUT


def _run_command(args: argparse.Namespace) -> int:
    if args.command == "health":
        return health.run(args)
    if args.command in fleet_cli.COMMANDS:
        return fleet_cli.main(args, recommended_plan)
    try:
        with _planner(args) as client:
            text, status = run(args, client)
        print(text)
    except InvalidArgument as exc:
        for v in exc.violations or []:
            print(f"error: {v.field}: {v.description}", file=sys.stderr)
        if not exc.violations:
            print(f"error: {exc}", file=sys.stderr)
        return exit_status.BAD_INPUT
    except Unavailable as exc:
        print(f"error: planner at {args.address} is unavailable ({exc}); start it with 'tunefleet serve planner' "
              "or drop --address to plan in-process", file=sys.stderr)
        return exit_status.UNAVAILABLE
    except TunefleetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_status.FAILED
    return status


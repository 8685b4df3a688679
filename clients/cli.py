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
from tunefleet.v1 import hardware_pb2, plan_pb2, planner_pb2, training_pb2

from clients import connection, fleet_cli, health, render
from clients.arguments import (
    BadInputError,
    choice_list,
    count,
    fraction,
    margin,
    model_ref,
    non_negative_float,
    positive_float,
    positive_int,
)
from clients.errors import InvalidArgument, TunefleetError, Unavailable
from clients.planner_client import PlannerClient
from common.units import GiB
from contract.enums import spellings
from contract.limits import MAX_OOM_REPLANS
from contract.oom import DEFAULT_MAX_REPLANS

# Exit status, for scripts: `tunefleet fit ... && rent-the-gpu`.
EXIT_OK = 0  # done; for fit and estimate: the job fits
EXIT_ERROR = 1  # the planner answered with an error that is not the request's fault
EXIT_BAD_INPUT = 2  # a flag or file is wrong; the message names it
EXIT_DOES_NOT_FIT = 3  # fit / estimate: the job does not fit (the table says by how much and what to change)
EXIT_UNAVAILABLE = 4  # the planner at --address could not be reached
EXIT_STATUS = (f"exit status: {EXIT_OK} fits (or done), {EXIT_DOES_NOT_FIT} does not fit (fit, estimate), "
               f"{EXIT_BAD_INPUT} bad input,\n  {EXIT_UNAVAILABLE} planner unreachable, {EXIT_ERROR} other error\n")
EXAMPLES = """examples:
  tunefleet fit --model meta-llama/Llama-3.1-8B --method qlora --gpu rtx-4090 --micro-batch 1 --seq-len 2048
  tunefleet fit --model ./my-model/config.json --method full --gpu a100-80gb --gpus 4 --zero 3 --json
  tunefleet estimate --model Qwen/Qwen2.5-7B --method lora --flavor a10g-large --tokens 10M
  tunefleet recommend --model meta-llama/Llama-3.1-70B --method qlora --tokens 50M --budget 200
  tunefleet hardware
  tunefleet models
  tunefleet submit plan.json --watch          # run a plan on the fleet and follow it
  tunefleet jobs --feedback --json            # measured vs predicted, for calibration
"""
# Every choice is spelled as the proto spells it (contract.enums): a value added to a proto enum is a choice here.
METHODS = spellings(training_pb2.Method, "METHOD_")
PRECISIONS = spellings(training_pb2.Precision, "PRECISION_")
OFFLOADS = spellings(training_pb2.Offload, "OFFLOAD_")
OPTIMIZERS = spellings(training_pb2.Optimizer, "OPTIMIZER_")
ATTENTIONS = spellings(training_pb2.Attention, "ATTENTION_")
LOSSES = spellings(training_pb2.Loss, "LOSS_")
DATASET_FORMATS = spellings(plan_pb2.DatasetFormat, "DATASET_FORMAT_")
OVERSIZE_IMAGES = spellings(plan_pb2.OversizeImages, "OVERSIZE_IMAGES_")
RANKS = spellings(planner_pb2.RankBy, "RANK_BY_")
OOM_MOVES = spellings(plan_pb2.OomMove, "OOM_MOVE_")
CALIBRATION_ENV = "TUNEFLEET_CALIBRATION"
def _add_margin_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--margin", type=margin, default=0.0,
                   help="headroom to demand beyond the predicted total, e.g. 10%%: fits only with that much to spare "
                        "(the output also gives the likely range and says 'tight' when the GPU is inside it)")


def _add_job_args(p: argparse.ArgumentParser, *, hardware: bool = True) -> None:
    g = p.add_argument_group("model and method")
    g.add_argument("--model", required=True, help="catalog name (see 'tunefleet models'), or a config.json / folder")
    g.add_argument("--method", choices=METHODS, default="lora", help="fine-tuning method (default %(default)s)")
    g.add_argument("--precision", choices=PRECISIONS,
                   help="bf16/fp16: mixed precision with fp32 master weights; bf16-pure: no master copy (not run by "
                        "tunefleet's executor). Default: bf16, or fp16 on GPUs without bf16 (T4, V100, RTX 20xx)")
    g.add_argument("--lora-r", type=positive_int, default=16, help="LoRA rank (default %(default)s)")
    g.add_argument("--lora-alpha", type=positive_float, default=32.0)
    g.add_argument("--lora-dropout", type=fraction, default=0.05, help="in [0, 1) (default %(default)s)")
    g.add_argument("--lora-targets", default="all-linear", help="comma-separated module names, or all-linear")
    g.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw")
    g.add_argument("--dpo", action="store_true", help="DPO objective (chosen + rejected per example)")
    g.add_argument("--dpo-ref-model", action="store_true", help="DPO with a separate reference model copy")
    g.add_argument("--dpo-beta", type=positive_float, help="DPO: pull toward the reference (default 0.1)")
    g.add_argument("--dpo-label-smoothing", type=fraction, default=0.0,
                   help="DPO: probability a preference is flipped (cDPO), below 0.5 (default 0)")
    g.add_argument("--dpo-sft-weight", type=non_negative_float, default=0.0,
                   help="DPO: weight of an SFT term on the chosen responses (default 0)")
    g.add_argument("--dpo-precompute-reference", action="store_true",
                   help="DPO: reference log-probs computed once before training; no reference held while training")
    g.add_argument("--image-tokens", type=int, default=0, help="vision-language: image tokens per example")
    g.add_argument("--train-vision", action="store_true", help="vision-language: train the vision tower too")
    g.add_argument("--freeze-layers", type=int, default=0, help="method freeze: train the last N layers")
    b = p.add_argument_group("batch and memory layout")
    b.add_argument("--micro-batch", type=positive_int, default=1, help="sequences per GPU per step (default 1)")
    b.add_argument("--seq-len", type=positive_int, default=2048, help="tokens per sequence (default 2048)")
    b.add_argument("--grad-accum", type=positive_int, default=1, help="gradient accumulation steps")
    b.add_argument("--zero", type=int, choices=range(4), metavar="{0-3}", help="DeepSpeed ZeRO stage "
                   "(default 0 on one GPU, 2 on several)")
    b.add_argument("--offload", choices=OFFLOADS, default="none", help="DeepSpeed CPU offload")
    b.add_argument("--grad-ckpt", action=argparse.BooleanOptionalAction, default=True,
                   help="gradient checkpointing (default on)")
    b.add_argument("--attention", choices=ATTENTIONS, default="sdpa")
    b.add_argument("--loss", choices=LOSSES, default="standard", help="chunked: fused/chunked cross-entropy")
    if hardware:
        h = p.add_argument_group("hardware")
        h.add_argument("--gpu", help="GPU class or alias, e.g. rtx-4090, a100-80gb, h100 (see 'tunefleet hardware')")
        h.add_argument("--flavor", help="provider flavor, e.g. a10g-large, l4x4 (sets GPU, count and price)")
        h.add_argument("--gpus", type=positive_int, help="GPUs per node (default 1, or the flavor's)")
        h.add_argument("--nodes", type=positive_int, default=1)
        h.add_argument("--host-memory-gb", type=positive_float, help="host RAM per node in GiB")
        h.add_argument("--price-per-hour", type=non_negative_float,
                       help="USD per GPU-hour (overrides the catalog; 0 for a free tier)")
        h.add_argument("--spot", action="store_true", help="use spot prices where the catalog has them")


def _add_client_args(p: argparse.ArgumentParser) -> None:
    c = p.add_argument_group("output and server")
    c.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    c.add_argument("--address", default=os.environ.get("TUNEFLEET_PLANNER", ""),
                   help="planner host:port (env TUNEFLEET_PLANNER); empty plans in-process")
    c.add_argument("--calibration", type=Path, default=os.environ.get(CALIBRATION_ENV) or None,
                   help="in-process: plan with the fleet's own runs ('tunefleet calibrate --out FILE'; env "
                        f"{CALIBRATION_ENV}); a planner service takes it with 'serve planner --calibration'")
    connection.add_arguments(c)


def _training(a: argparse.Namespace) -> training_pb2.TrainingSpec:
    t = training_pb2.TrainingSpec(
        method=METHODS[a.method], optimizer=OPTIMIZERS[a.optimizer],
        precision=PRECISIONS[a.precision] if a.precision else training_pb2.PRECISION_UNSPECIFIED,
        offload=OFFLOADS[a.offload], gradient_checkpointing=a.grad_ckpt, attention=ATTENTIONS[a.attention],
        loss=LOSSES[a.loss], micro_batch_size=a.micro_batch, sequence_length=a.seq_len,
        gradient_accumulation_steps=a.grad_accum,
        objective=training_pb2.OBJECTIVE_DPO if a.dpo else training_pb2.OBJECTIVE_SFT,
        dpo_reference_model=a.dpo_ref_model, image_tokens=a.image_tokens, train_vision_tower=a.train_vision,
        freeze_trainable_layers=a.freeze_layers, dpo=_dpo(a),
        lora=training_pb2.LoraSpec(rank=a.lora_r, alpha=a.lora_alpha, dropout=a.lora_dropout,
                                   target_modules=[x.strip() for x in a.lora_targets.split(",") if x.strip()]))
    if a.zero is not None:
        t.zero_stage = a.zero
    return t


def _dpo(a: argparse.Namespace) -> training_pb2.DpoSpec | None:
    knobs = a.dpo_beta is not None or a.dpo_label_smoothing or a.dpo_sft_weight or a.dpo_precompute_reference
    if knobs and not a.dpo:
        raise BadInputError("--dpo-beta, --dpo-label-smoothing, --dpo-sft-weight and --dpo-precompute-reference "
                         "are DPO knobs: add --dpo")
    if not a.dpo:
        return None
    d = training_pb2.DpoSpec(label_smoothing=a.dpo_label_smoothing, sft_weight=a.dpo_sft_weight,
                             precompute_reference=a.dpo_precompute_reference)
    if a.dpo_beta is not None:
        d.beta = a.dpo_beta
    return d


def _hardware(a: argparse.Namespace) -> hardware_pb2.HardwareSpec:
    if not a.gpu and not a.flavor:
        raise BadInputError("name the hardware with --gpu (e.g. --gpu rtx-4090) or --flavor (e.g. a10g-large)")
    h = hardware_pb2.HardwareSpec(gpu=a.gpu or "", flavor=a.flavor or "", gpus_per_node=a.gpus or 0, nodes=a.nodes,
                                  spot=a.spot)
    if a.host_memory_gb:
        h.host_memory_bytes = int(a.host_memory_gb * GiB)
    if a.price_per_hour is not None:
        h.hourly_usd_per_gpu = a.price_per_hour
    return h


def _workload(a: argparse.Namespace) -> training_pb2.WorkloadSpec:
    if not a.tokens and not a.max_steps:
        raise BadInputError("say how much data: --tokens 10M (with --epochs) or --max-steps N")
    return training_pb2.WorkloadSpec(dataset_tokens=a.tokens or 0, epochs=a.epochs, max_steps=a.max_steps or 0)


def _add_workload_args(p: argparse.ArgumentParser) -> None:
    w = p.add_argument_group("workload")
    w.add_argument("--tokens", type=count, help="training tokens per epoch, e.g. 10M")
    w.add_argument("--epochs", type=positive_float, default=1.0)
    w.add_argument("--max-steps", type=positive_int, help="optimizer steps (overrides --tokens)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tunefleet", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=EXIT_STATUS + EXAMPLES)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fit = sub.add_parser("fit", help="will it fit: per-GPU and host memory, term by term",
                         description="Predict peak memory per GPU and per node, the largest micro-batch that fits, "
                                     "and what to change when it does not fit.", epilog=EXIT_STATUS + EXAMPLES,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_job_args(fit)
    _add_margin_arg(fit)
    fit.add_argument("--inference", action="store_true",
                     help="size serving instead of training: weights, the KV cache of --micro-batch sequences of "
                          "--seq-len tokens, and the prefill (--method qlora / lora-8bit: 4- / 8-bit weights)")
    _add_client_args(fit)
    est = sub.add_parser("estimate", help="how long and how much money",
                         description="Fit, plus step time, wall time, GPU-hours and cost as a range.",
                         epilog=EXIT_STATUS, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_job_args(est)
    _add_margin_arg(est)
    _add_workload_args(est)
    _add_client_args(est)
    rec = sub.add_parser("recommend", help="the cheapest (or fastest) hardware that runs the job",
                         description="Search every catalog GPU and flavor x GPU count x ZeRO x offload x "
                                     "checkpointing x micro-batch; print ranked options, why the rest were "
                                     "rejected, and an executable plan (with --json).")
    _add_job_args(rec, hardware=False)
    _add_workload_args(rec)
    d = rec.add_argument_group("plan")
    d.add_argument("--dataset", help="training data for the plan: a JSONL file, or a Hugging Face dataset name")
    d.add_argument("--dataset-format", choices=DATASET_FORMATS, default="text",
                   help="text {'text'}, instruction {'instruction','response'}, chat {'messages'}, preference "
                        "{'prompt','chosen','rejected'} for --dpo (default text)")
    d.add_argument("--oversize-images", choices=OVERSIZE_IMAGES, default="resize",
                   help="vision-language: an image over --image-tokens is scaled down, or refused (default resize)")
    d.add_argument("--packing", action="store_true", help="pack examples into full-length sequences")
    d.add_argument("--on-oom", type=choice_list(OOM_MOVES, "move"), metavar="MOVES",
                   help="what a fleet worker may change when the run runs out of GPU memory, cheapest first: "
                        f"{', '.join(OOM_MOVES)} (default: the first four, which keep the training as planned)")
    d.add_argument("--max-replans", type=positive_int,
                   help=f"re-plans after out-of-memory before the job fails (default {DEFAULT_MAX_REPLANS}, "
                        f"at most {MAX_OOM_REPLANS})")
    d.add_argument("--no-replan", action="store_true",
                   help="fail at the first out-of-memory instead of re-planning")
    d.add_argument("--deterministic", action="store_true",
                   help="bitwise-reproducible GPU kernels (slower backward; a resume then matches an uninterrupted run "
                        "bit for bit on a GPU too)")
    d.add_argument("--save-plan", type=Path, metavar="FILE",
                   help="write the best option as an executable plan (JSON) for 'tunefleet train FILE'")
    r = rec.add_argument_group("constraints")
    r.add_argument("--budget", type=positive_float, help="most USD to spend")
    r.add_argument("--deadline-hours", type=positive_float, help="latest finish, in hours of wall time")
    r.add_argument("--allow-gpu", action="append", default=[], help="only these GPU classes (repeatable)")
    r.add_argument("--provider", action="append", default=[], help="only these providers (repeatable)")
    r.add_argument("--max-gpus", type=positive_int, default=8)
    r.add_argument("--methods", type=choice_list(METHODS, "method"), default=[],
                   help="methods the search may switch to, e.g. lora,qlora")
    r.add_argument("--rank-by", choices=RANKS, default="cost")
    r.add_argument("--spot", action="store_true", help="allow spot prices")
    r.add_argument("--limit", type=positive_int, default=10)
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
    serve = sub.add_parser("serve", help="run a service: 'tunefleet serve planner' or 'tunefleet serve executor'")
    serve.add_argument("service", choices=["planner", "executor"])
    serve.add_argument("rest", nargs=argparse.REMAINDER, help="options passed to the service (see --help there)")
    return parser


def _on_oom(a: argparse.Namespace) -> plan_pb2.OomPolicy:
    if a.max_replans is not None and a.max_replans > MAX_OOM_REPLANS:
        raise BadInputError(f"--max-replans: at most {MAX_OOM_REPLANS}, got {a.max_replans}")
    return plan_pb2.OomPolicy(moves=a.on_oom or [], max_replans=a.max_replans or 0, disabled=a.no_replan)


def _recommend_request(a: argparse.Namespace) -> planner_pb2.RecommendRequest:
    constraints = planner_pb2.Constraints(
        allowed_gpus=a.allow_gpu, allowed_providers=a.provider, max_gpus=a.max_gpus, allow_spot=a.spot,
        rank_by=RANKS[a.rank_by], allowed_methods=a.methods)
    if a.budget:
        constraints.max_cost_usd = a.budget
    if a.deadline_hours:
        constraints.max_duration_s = a.deadline_hours * 3600
    return planner_pb2.RecommendRequest(model=model_ref(a.model), training=_training(a), workload=_workload(a),
                                        constraints=constraints, limit=a.limit, dataset=_dataset(a))


def _planner(a: argparse.Namespace) -> PlannerClient:
    c = connection.from_arguments(a, a.address)
    return PlannerClient(a.address or None, token=c.token, tls_ca=c.tls_ca, tls_server_name=c.tls_server_name,
                         calibration=a.calibration)


def recommended_plan(argv: list[str]) -> plan_pb2.Plan:
    """The plan `tunefleet recommend ARGV` would save: for `tunefleet submit --from-recommend ARGV`."""
    a = build_parser().parse_args(["recommend", *argv])
    with _planner(a) as client:
        rec = client.recommend(_recommend_request(a))
    if not rec.HasField("plan"):
        raise SystemExit("error: --from-recommend: no option meets the constraints; run 'tunefleet recommend' with "
                         "the same options to see why each was rejected")
    return rec.plan


def run(a: argparse.Namespace, client: PlannerClient) -> tuple[str, int]:
    """The command's output and its exit status."""
    if a.command == "fit":
        inference = planner_pb2.InferenceSpec(batch_size=a.micro_batch, context_tokens=a.seq_len) \
            if a.inference else None
        fit_resp = client.fit(planner_pb2.FitRequest(model=model_ref(a.model), training=_training(a),
                                                     hardware=_hardware(a), margin_fraction=a.margin,
                                                     inference=inference))
        text = render.dumps(fit_resp.result) if a.json else render.fit_text(fit_resp.result)
        return text, EXIT_OK if fit_resp.result.fits else EXIT_DOES_NOT_FIT
    if a.command == "estimate":
        est = client.estimate(planner_pb2.EstimateRequest(model=model_ref(a.model), training=_training(a),
                                                          hardware=_hardware(a), workload=_workload(a),
                                                          margin_fraction=a.margin))
        return (render.dumps(est) if a.json else render.estimate_text(est)), \
            EXIT_OK if est.fit.fits else EXIT_DOES_NOT_FIT
    return _listing(a, client), EXIT_OK


def _listing(a: argparse.Namespace, client: PlannerClient) -> str:
    if a.command == "recommend":
        rec = client.recommend(_recommend_request(a))
        text = render.dumps(rec) if a.json else render.recommend_text(rec)
        if a.save_plan and rec.HasField("plan"):
            rec.plan.on_oom.CopyFrom(_on_oom(a))
            rec.plan.hyperparameters.deterministic = a.deterministic
            a.save_plan.write_text(json_format.MessageToJson(rec.plan))
            text += "" if a.json else f"\nplan written to {a.save_plan}; run it with: tunefleet train {a.save_plan}"
        return text
    if a.command == "hardware":
        hw = client.list_hardware(planner_pb2.ListHardwareRequest(provider=a.provider))
        return render.dumps(hw) if a.json else render.hardware_text(hw)
    models = client.list_models()
    return render.dumps(models) if a.json else render.models_text(models)


def _dataset(a: argparse.Namespace) -> plan_pb2.DatasetRef:
    ref = plan_pb2.DatasetRef(format=DATASET_FORMATS[a.dataset_format], packing=a.packing,
                              oversize_images=OVERSIZE_IMAGES[a.oversize_images])
    if a.dataset and Path(a.dataset).suffix in (".jsonl", ".json") or a.dataset and Path(a.dataset).exists():
        ref.local_path = str(Path(a.dataset).resolve())
    elif a.dataset:
        ref.hub_name = a.dataset
    return ref


def main(argv: list[str] | None = None) -> int:
    """The `tunefleet` entry point. Output piped into a reader that stops early (`tunefleet hardware | head`) ends
    quietly with the command's status: the reader has what it wanted."""
    try:
        status = _main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes at exit
        return EXIT_OK
    return status


def _main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # every option after 'worker' or 'train' is that command's own, --help included; each imports what it needs
    if argv[:1] == ["worker"]:
        from executor.worker.main import main as worker_main
        return worker_main(argv[1:])
    if argv[:1] == ["train"]:
        from executor.training.command import main as train_main
        return train_main(argv[1:], prog="tunefleet train")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _run_command(args)
    except BadInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _run_command(args: argparse.Namespace) -> int:
    if args.command == "health":
        return health.run(args)
    if args.command == "serve" and args.service == "executor":
        from executor.service.__main__ import serve as serve_executor
        return serve_executor(args.rest)
    if args.command == "serve":
        from planner.serve import serve
        return serve(args.rest)
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
        return EXIT_BAD_INPUT
    except Unavailable as exc:
        print(f"error: planner at {args.address} is unavailable ({exc}); start it with 'tunefleet serve planner' "
              "or drop --address to plan in-process", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except TunefleetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return status


if __name__ == "__main__":
    raise SystemExit(main())

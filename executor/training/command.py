"""The `train` command, shared by `tunefleet train` and `python -m executor.training`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common import exit_status
from contract.errors import ExecutorError
from contract.paths import Roots
from contract.progress import DEFAULT_PROGRESS_INTERVAL_S, describe, event_to_json
from contract.rendezvous import Rendezvous

# The training stack (torch, DeepSpeed) is imported only when a run starts, so that `tunefleet --help`
# and the planner commands work on an install without the 'train' extra.

DESCRIPTION = f"""\
Run a plan on this host with DeepSpeed (one rank per GPU; CPU ranks with gloo where there is no GPU).

The plan is the JSON that `tunefleet recommend --save-plan plan.json` writes (or binary protobuf). The run
writes into the plan's output_uri (or --output): progress.jsonl (one event per line), logs/train.log (every
rank's output), checkpoints/step-NNNNNNNN (every hyperparameters.checkpoint_every_steps steps and at the
end), final/ (the adapter or model with save_pretrained, and the tokenizer) and summary.json (measured vs
predicted memory and speed). Run the same plan again to resume from its last complete checkpoint.

Step 1 is the preflight: it trains on the longest batch and reports measured peak memory against the plan.

The run reads its dataset and a local model folder only under --data-root and writes only under --output-root
(default: the current directory); checkpoints are signed with this host's checkpoint key
(TUNEFLEET_CHECKPOINT_KEY, else ~/.local/state/tunefleet/checkpoint.key) and refused at resume otherwise.

SIGTERM or Ctrl-C cancels the run (the checkpoints stay); SIGUSR1 stops it without ending it, as a fleet
worker does when it shuts down.

exit status: {exit_status.OK} done, {exit_status.FAILED} training failed or cancelled (see logs/train.log), \
{exit_status.BAD_INPUT} the plan cannot run here
(the message says why), {exit_status.INTERRUPTED} interrupted by SIGUSR1 (run the plan again to resume)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("plan", type=Path, help="plan file (JSON or binary tunefleet.v1.Plan)")
    p.add_argument("--output", help="output directory (default: the plan's output_uri)")
    p.add_argument("--progress-interval-s", type=float, default=DEFAULT_PROGRESS_INTERVAL_S,
                   help="seconds between training progress events (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print progress events as JSON lines")
    Roots.add_arguments(p)
    p.add_argument("--supervised", action="store_true", help=argparse.SUPPRESS)  # a fleet worker's run: dies with it
    Rendezvous.add_arguments(p)  # one node of a fleet gang's multi-node run
    p.add_argument("--check", action="store_true",
                   help="run every check (plan, host, model modules, dataset) and say what the run would be; "
                        "train nothing")


def run(args: argparse.Namespace) -> int:
    if not args.plan.is_file():
        print(f"tunefleet train: plan file {args.plan} does not exist", file=sys.stderr)
        return exit_status.BAD_INPUT

    try:
        from executor.training.process import prepare

        prepare()  # this process, before the training stack is imported
        from executor.training.launcher import check_plan, train
    except ImportError as e:
        print(f"tunefleet train: the training stack is not installed ({e.name} is missing); "
              "install it with: pip install 'tunefleet[train]'", file=sys.stderr)
        return exit_status.BAD_INPUT

    def show(event: object) -> None:
        print(event_to_json(event) if args.json else describe(event), flush=True)

    try:
        if args.check:
            r = check_plan(args.plan, args.output, Roots.from_arguments(args))
            t = r.config.training
            where = f"{r.gpus} GPU(s)" if r.gpus else "the CPU (gloo)"
            print(f"plan {r.config.plan_id} can run here: {r.examples:,} examples ({r.trained_tokens:,} tokens to "
                  f"learn), {r.total_steps:,} steps of {t.micro_batch_size} x {r.config.world_size} rank(s) x "
                  f"{t.gradient_accumulation_steps} micro-batches, on {where}; output {r.config.output_dir}")
            return exit_status.OK
        result = train(args.plan, args.output, args.progress_interval_s, on_event=show,
                       supervised=args.supervised, roots=Roots.from_arguments(args),
                       rendezvous=Rendezvous.from_arguments(args))
    except ExecutorError as e:
        print(f"tunefleet train: {e}", file=sys.stderr)
        return exit_status.BAD_INPUT
    if result.succeeded:
        if not args.json:
            summary = json.loads(result.config.summary_path.read_text())
            print(f"done: {summary['final_dir']} (summary {result.config.summary_path})")
        return exit_status.OK
    if result.interrupted:
        print(f"tunefleet train: interrupted at step {result.last_event.step}; run the plan again to resume",
              file=sys.stderr)
        return exit_status.INTERRUPTED
    print(f"tunefleet train: {result.last_event.message}", file=sys.stderr)
    return exit_status.BAD_INPUT if result.refused else exit_status.FAILED


def main(argv: list[str] | None = None, prog: str = "python -m executor.training") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))

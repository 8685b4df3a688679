"""`tunefleet COMMAND ...`: each command to the layer that runs it (package docstring)."""

from __future__ import annotations

import os
import sys

from clients import cli
from common import exit_status


def main(argv: list[str] | None = None) -> int:
    """Output piped into a reader that stops early (`tunefleet hardware | head`) ends quietly with the command's
    status: the reader has what it wanted."""
    try:
        status = _dispatch(sys.argv[1:] if argv is None else argv)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes at exit
        return exit_status.OK
    return status


def _dispatch(argv: list[str]) -> int:
    # every option after 'worker' or 'train' is that command's own, --help included
    if argv[:1] == ["worker"]:
        from executor.worker.main import main as worker_main
        return worker_main(argv[1:])
    if argv[:1] == ["train"]:
        from executor.training.command import main as train_main
        return train_main(argv[1:], prog="tunefleet train")
    if argv[:1] == ["serve"]:
        args = cli.build_parser().parse_args(argv)  # 'serve --help' and an unknown service answer as every command
        return _serve(args.service, args.rest)
    return cli.main(argv)


def _serve(service: str, rest: list[str]) -> int:
    if service == "dashboard":
        from dashboard.serve import main as serve_dashboard
        return serve_dashboard(rest)
    if service == "executor":
        from executor.service.__main__ import serve as serve_executor
        return serve_executor(rest)
    from planner.serve import serve
    return serve(rest)

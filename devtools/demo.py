"""`make run`: the whole stack on this machine, on embedded defaults, then everything it started is stopped.

Redis (a redis-server of its own on a free port, with its data under .tunefleet/redis; it never touches a
Redis it did not start, such as one on 6379), the planner, the executor service, one worker (class cpu
without a GPU) and the dashboard (its URL is printed; these services run without tokens, so its login takes an
empty token). It builds a tiny Llama and a dataset locally (nothing downloaded), asks the planner whether the
job fits, submits the plan, follows it to DONE with the progress bar, and prints the job's Feedback (measured vs
predicted).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tunefleet.v1 import hardware_pb2, model_pb2, planner_pb2, progress_pb2

from clients import fleet_render, render
from clients.executor_client import ExecutorClient
from clients.planner_client import PlannerClient
from common.net import free_port
from common.wait import wait_until
from devtools.local_redis import RedisServerError, start_redis_server, stop_redis_server

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
DEFAULT_STATE_DIR = Path(".tunefleet")
DEMO_STEPS = 120
DASHBOARD_PORT = 8080
PLANNED_GPU = "cpu"  # the planner's CPU host class (planner.data.cpus): the demo worker's class


def _say(text: str) -> None:
    print(f"==> {text}", flush=True)


def _shown(path: Path) -> str:
    """A path as the person who ran `make run` reads it: relative to where they ran it, when it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


@contextmanager
def _process(name: str, command: list[str], log_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child in its own process group, stopped with SIGTERM (then SIGKILL) when the block ends."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / f"{name}.log").open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything of its tree that outlived it


def _wait_healthy(address: str, proc: subprocess.Popen[bytes], name: str, logs: Path) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)

        def serving() -> bool:
            if proc.poll() is not None:
                raise SystemExit(f"{name} exited with status {proc.returncode}; see {_shown(logs / name)}.log")
            try:
                return bool(stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0).status ==
                            health_pb2.HealthCheckResponse.SERVING)
            except grpc.RpcError:
                return False  # not up yet
        try:
            wait_until(serving, START_TIMEOUT_S, poll_s=0.2)
        except TimeoutError:
            raise SystemExit(f"{name} did not become healthy within {START_TIMEOUT_S:.0f} s") from None


def _dashboard_port() -> int:
    """8080 when it is free (the port the README names), else any free one."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", DASHBOARD_PORT))
        except OSError:
            return free_port()
    return DASHBOARD_PORT


def _wait_http(url: str, proc: subprocess.Popen[bytes], name: str, logs: Path) -> None:
    def answers() -> bool:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited with status {proc.returncode}; see {_shown(logs / name)}.log")
        try:
            with urllib.request.urlopen(url, timeout=1.0) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False  # not up yet
    try:
        wait_until(answers, START_TIMEOUT_S, poll_s=0.2)
    except TimeoutError:
        raise SystemExit(f"{name} did not answer {url} within {START_TIMEOUT_S:.0f} s") from None


def _redis(stack: ExitStack, logs: Path, state_dir: Path) -> str:
    data = (state_dir / "redis").resolve()
    data.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / "redis.log").open("wb") as log:
        try:
            proc, url = start_redis_server(data, appendonly=True, log=log)
        except RedisServerError as e:
            raise SystemExit(f"error: {e}") from None
    stack.callback(stop_redis_server, proc)
    _say(f"started redis-server at {url} (data in {_shown(data)})")
    return url


def run(steps: int, keep_serving: bool = False, state_dir: Path = DEFAULT_STATE_DIR) -> int:
    from transformers.utils import logging as transformers_logging

    from devtools.tiny import build_model, counting_text, make_plan

    transformers_logging.disable_progress_bar()  # saving the tiny model is instant: no bar for it

    logs = (state_dir / "logs").resolve()
    cli = [sys.executable, "-m", "launch"]
    with ExitStack() as stack:
        redis_url = _redis(stack, logs, state_dir)
        planner_address, executor_address = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        planner = stack.enter_context(_process("planner", [*cli, "serve", "planner", "--address", planner_address],
                                               logs))
        executor = stack.enter_context(_process("executor", [*cli, "serve", "executor", "--address", executor_address,
                                                             "--redis", redis_url], logs))
        host_id = f"demo-{socket.gethostname()}-{os.getpid()}"  # two demos on one machine are two hosts
        stack.enter_context(_process("worker", [*cli, "worker", "--redis", redis_url, "--gpu-class", "cpu",
                                                "--host-id", host_id, "--work-dir", str(state_dir / "runs"),
                                                "--data-root", str(state_dir),
                                                "--progress-interval-s", "1"], logs))
        dashboard_address = f"127.0.0.1:{_dashboard_port()}"
        dashboard = stack.enter_context(_process("dashboard", [
            *cli, "serve", "dashboard", "--address", dashboard_address, "--executor", executor_address,
            "--planner", planner_address], logs))
        _wait_healthy(planner_address, planner, "planner", logs)
        _wait_healthy(executor_address, executor, "executor", logs)
        _wait_http(f"http://{dashboard_address}/healthz", dashboard, "dashboard", logs)
        _say(f"planner on {planner_address}, executor on {executor_address}, worker {host_id}; logs in "
             f"{_shown(logs)}")
        _say(f"dashboard: http://{dashboard_address}/ (log in with an empty token: this demo runs without tokens)")

        demo = (state_dir / "demo").resolve()
        model_dir = demo / "tiny-llama"
        if not (model_dir / "config.json").is_file():
            _say(f"building a tiny Llama and its data in {_shown(demo)} (made here, nothing downloaded)")
            build_model(model_dir)
        data = counting_text(demo / "data.jsonl", records=256)
        job_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
        plan = make_plan(model_dir, data, Path(job_id), max_steps=steps, checkpoint_every=10, plan_id=job_id)
        # the model's shape travels with the plan, so the fleet predicts the job itself (its expected start, its hold)
        plan.model.CopyFrom(model_pb2.ModelRef(config_json=(model_dir / "config.json").read_text(),
                                               weights=str(model_dir)))
        with PlannerClient(planner_address) as planner_client:
            answer = planner_client.estimate(planner_pb2.EstimateRequest(
                model=plan.model, training=plan.training, hardware=hardware_pb2.HardwareSpec(gpu=PLANNED_GPU),
                workload=plan.workload))
        fit, estimate = answer.fit, answer.estimate
        plan.prediction.fit.CopyFrom(fit)
        plan.prediction.estimate.CopyFrom(estimate)
        _say(f"planner: {'fits' if fit.fits else 'does NOT fit'} on the worker's CPU host class ({PLANNED_GPU}), "
             f"{render.gib(fit.per_gpu.total_bytes)} a rank, {estimate.step_time_s * 1000:.1f} ms a step after a "
             f"start-up of {estimate.duration_s - estimate.total_steps * estimate.step_time_s:.0f} s")

        with ExecutorClient(executor_address) as client:
            submitted = client.submit(plan)
            _say(f"submitted job {job_id} to {submitted.job.queue}; watching it")
            last = fleet_render.follow(client.watch(job_id), fit.per_gpu.total_bytes)
            job = client.get(job_id)
            with contextlib.suppress(TimeoutError):  # the worker finishes its bookkeeping (best effort)
                wait_until(lambda: all(h.running_job_id != job_id for h in client.fleet().hosts), STOP_TIMEOUT_S,
                           poll_s=0.2)
            print()
            print(fleet_render.jobs_text([job]))
            print()
            print(fleet_render.feedback_text([job]))
            print()
            print(fleet_render.fleet_text(client.fleet()))
        if keep_serving:
            _say(f"the job is on http://{dashboard_address}/jobs/{job_id}; Ctrl-C stops everything")
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
        _say(f"outputs in {_shown(Path(job.output_uri))}; stopping what this run started")
    if last.phase != progress_pb2.PHASE_DONE:
        print(f"demo job ended {fleet_render.phase_name(last.phase)}: {last.message}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m devtools.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=DEMO_STEPS,
                   help="optimizer steps of the demo job (default %(default)s)")
    p.add_argument("--keep-serving", action="store_true",
                   help="after the job, keep every service (and the dashboard) up until Ctrl-C")
    p.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                   help="where its Redis data, logs, tiny model and runs go (default %(default)s)")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # the demo runs on the CPU: no 'no GPU found' warning from DeepSpeed
    return run(args.steps, args.keep_serving, args.state_dir)


if __name__ == "__main__":
    raise SystemExit(main())

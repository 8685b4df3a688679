"""Helpers of the fleet's end-to-end tests: plans in the workers' shared work dir, waiting on conditions and
watch streams, process trees, and what a run left on disk."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from tunefleet.v1 import plan_pb2, progress_pb2

from clients.executor_client import ExecutorClient
from common.identity import Identities, token_sha256
from common.wait import wait_until
from devtools.tiny import make_plan
from executor.training import checkpoint

TERMINAL = (progress_pb2.PHASE_DONE, progress_pb2.PHASE_FAILED, progress_pb2.PHASE_CANCELLED)
WAIT_S = 300.0


def fleet_plan(tiny_model: Path, data: Path, job_id: str, **kw: object) -> plan_pb2.Plan:
    plan = make_plan(tiny_model, data, Path(job_id), plan_id=job_id, **kw)  # type: ignore[arg-type]
    plan.output_uri = job_id  # relative: lands in the workers' shared work dir
    return plan


def wait_for(condition: Callable[[], object], what: str, timeout_s: float = WAIT_S) -> object:
    """Poll a condition (not a sleep: it returns as soon as the condition holds)."""
    try:
        return wait_until(condition, timeout_s)
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}")


def holder_of(client: ExecutorClient, job_id: str) -> str:
    """The host that runs the job, once one does."""
    return str(wait_for(lambda: client.get(job_id).host_id, f"a host to take {job_id}"))


def watch_until(client: ExecutorClient, job_id: str, done: Callable[[progress_pb2.ProgressEvent], bool],
                 after: int = 0) -> list[progress_pb2.ProgressEvent]:
    seen = []
    for response in client.watch(job_id, after_sequence=after):
        if response.HasField("event"):
            seen.append(response.event)
            if done(response.event) or response.event.phase in TERMINAL:
                break
    return seen


def all_events(client: ExecutorClient, job_id: str) -> list[progress_pb2.ProgressEvent]:
    return watch_until(client, job_id, lambda e: False)


def events_at_end(client: ExecutorClient, job_id: str, timeout_s: float = WAIT_S) -> list[progress_pb2.ProgressEvent]:
    """Every event of the job once it has ended, failing the test (not waiting forever) when it does not end in
    time."""
    wait_for(lambda: client.get(job_id).phase in TERMINAL, f"{job_id} to end", timeout_s)
    return all_events(client, job_id)


def process_tree(pid: int) -> list[psutil.Process]:
    """A worker and every process under it (its launcher runs in a session of its own, still its child)."""
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def send_signal(processes: list[psutil.Process], sig: signal.Signals) -> None:
    for p in processes:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            continue


def assert_once_in_order(events: list[progress_pb2.ProgressEvent]) -> None:
    assert [e.sequence for e in events] == list(range(1, len(events) + 1)), "an event was lost or repeated"


def checkpoint_states(out: Path) -> list[checkpoint.TrainerState]:
    return [checkpoint.TrainerState(**json.loads((p / checkpoint.TRAINER_STATE).read_text()))
            for _, p in checkpoint.complete_checkpoints(out / "checkpoints")]


def run_processes(out: Path) -> list[psutil.Process]:
    """Live processes training into out, on any node (launchers, torchrun agents, ranks)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(str(out) in part for part in p.info["cmdline"] or []):
                found.append(p)
        except psutil.Error:
            continue
    return found


def identities(path: Path, people: list[tuple[str, str, str]], extra: str = "") -> Identities:
    """An identities file at `path` of (principal, team, role) people, each with the token '<principal>-token', and
    `extra` TOML ([[team]] tables, [prices]) after them; the Identities a service reads from it."""
    path.write_text("".join(f'[[identity]]\nprincipal = "{p}"\nteam = "{t}"\nrole = "{r}"\n'
                            f'token_sha256 = "{token_sha256(p + "-token")}"\n\n' for p, t, r in people) + extra)
    return Identities.from_file(path)

"""The fleet end to end: real redis-server, real executor gRPC service on loopback, real `tunefleet worker`
processes (rq), real DeepSpeed + PEFT training of a tiny Llama on the CPU."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import psutil
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from tunefleet.v1 import executor_pb2, executor_pb2_grpc, plan_pb2, progress_pb2

from clients.errors import InvalidArgument, NotFound, Unauthenticated
from clients.executor_client import ExecutorClient
from contract.liveness import RANK_MODULE
from contract.ownership import claim_output
from devtools.tiny import make_plan
from executor.training import checkpoint
from fleet.events import EventLog
from tests.conftest import TOKEN
from tests.integration.fleet_helpers import run_processes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
TERMINAL = (progress_pb2.PHASE_DONE, progress_pb2.PHASE_FAILED, progress_pb2.PHASE_CANCELLED)
RUN_S = 300.0  # bound on any wait for a training run's events


def _events(responses: Iterator[executor_pb2.WatchResponse]) -> list[progress_pb2.ProgressEvent]:
    return [r.event for r in responses if r.HasField("event")]


def _plan(tiny_model: Path, data: Path, plan_id: str, **kw: object) -> plan_pb2.Plan:
    return make_plan(tiny_model, data, Path(plan_id), plan_id=plan_id, **kw)  # type: ignore[arg-type]


def _until(client: ExecutorClient, job_id: str, phase: int) -> list[progress_pb2.ProgressEvent]:
    """Watch until the first event of `phase` (or the end); the events seen, in order."""
    seen = []
    for r in client.watch(job_id):
        if r.HasField("event"):
            seen.append(r.event)
            if r.event.phase in (phase, *TERMINAL):
                break
    return seen


def test_submit_watch_to_done_every_event_once_in_order(executor_service, start_worker, tiny_model, counting_data,
                                                        tmp_path):
    worker = start_worker("host-a")
    # a relative dataset path is relative to the worker's --work-dir (issue 23, item 11: it was the worker's cwd)
    (worker.work_dir / "data").mkdir()
    (worker.work_dir / "data" / "train.jsonl").write_bytes(counting_data.read_bytes())
    plan = _plan(tiny_model, Path("data/train.jsonl"), "fleet-done", max_steps=6, checkpoint_every=3)
    with ExecutorClient(executor_service.address, timeout_s=RUN_S) as client:
        first = client.submit(plan)
        again = client.submit(plan)
        assert first.created and not again.created
        assert again.job.job_id == first.job.job_id == "fleet-done" and first.job.queue == "tunefleet.cpu.normal"

        streams: list[list[progress_pb2.ProgressEvent]] = [[], []]

        def watch(i: int) -> None:
            streams[i] = _events(ExecutorClient(executor_service.address).watch("fleet-done"))
        watchers = [threading.Thread(target=watch, args=(i,)) for i in range(2)]
        for t in watchers:
            t.start()
        # A third watcher leaves after the preflight and comes back from the last sequence it saw.
        head = _until(client, "fleet-done", progress_pb2.PHASE_PREFLIGHT)
        rest = _events(client.watch("fleet-done", after_sequence=head[-1].sequence))
        for t in watchers:
            t.join(RUN_S)

        events = streams[0]
        assert [e.sequence for e in events] == list(range(1, len(events) + 1))
        assert streams[1] == events
        assert head + rest == events
        phases = [e.phase for e in events]
        assert phases[0] == progress_pb2.PHASE_QUEUED and phases[-1] == progress_pb2.PHASE_DONE
        assert progress_pb2.PHASE_PREFLIGHT in phases and phases.count(progress_pb2.PHASE_TRAINING) == 6
        assert "host host-a (cpu" in events[1].message

        job = client.get("fleet-done")
        assert job.phase == progress_pb2.PHASE_DONE and job.host_id == "host-a"
        assert job.feedback.measured_step_time_s > 0 and job.feedback.measured_tokens_per_s > 0
        assert {name: job.feedback.library_versions[name] for name in ("torch", "deepspeed", "transformers", "peft")} \
            == {name: importlib.metadata.version(name) for name in ("torch", "deepspeed", "transformers", "peft")}
        out = worker.work_dir / "fleet-done"
        assert job.output_uri == str(out) and (out / "final" / "adapter_model.safetensors").is_file()
        # the run's local record holds the same events as the stream, the service's QUEUED included
        local = [int(json.loads(line)["sequence"]) for line in (out / "progress.jsonl").read_text().splitlines()]
        assert local == [e.sequence for e in events]
        assert client.submit(plan).job.phase == progress_pb2.PHASE_DONE  # still one job

    cli = subprocess.run([sys.executable, "-m", "launch", "jobs", "--feedback", "--json", "--executor",
                          executor_service.address], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    exported = json.loads(cli.stdout)
    assert [row["job_id"] for row in exported] == ["fleet-done"]
    assert exported[0]["feedback"]["measured_step_time_s"] == pytest.approx(job.feedback.measured_step_time_s)
    watch = subprocess.run([sys.executable, "-m", "launch", "watch", "fleet-done", "--executor",
                            executor_service.address], capture_output=True, text=True, timeout=60)
    assert watch.returncode == 0 and watch.stdout.splitlines()[-1].startswith("[done]"), watch.stderr


def test_cancel_a_running_job_stops_its_whole_tree_and_keeps_the_checkpoint(executor_service, start_worker,
                                                                              tiny_model, counting_data):
    worker = start_worker("host-a")
    plan = _plan(tiny_model, counting_data, "fleet-cancel", max_steps=2000, checkpoint_every=5)
    with ExecutorClient(executor_service.address, timeout_s=60) as client:
        client.submit(plan)
        seen = _until(client, "fleet-cancel", progress_pb2.PHASE_CHECKPOINTING)
        assert seen[-1].phase == progress_pb2.PHASE_CHECKPOINTING
        out = worker.work_dir / "fleet-cancel"
        assert run_processes(out), "the run should be alive before Cancel"

        requested = client.cancel("fleet-cancel", reason="test")
        assert requested.phase in (progress_pb2.PHASE_TRAINING, progress_pb2.PHASE_CHECKPOINTING,
                                   progress_pb2.PHASE_CANCELLED)
        tail = _events(client.watch("fleet-cancel", after_sequence=seen[-1].sequence))
        assert tail[-1].phase == progress_pb2.PHASE_CANCELLED and "cancelled: test" in tail[-1].message
        assert client.get("fleet-cancel").phase == progress_pb2.PHASE_CANCELLED
    _, alive = psutil.wait_procs(run_processes(out), timeout=30)
    assert not alive, f"processes of the cancelled run survived: {[p.pid for p in alive]}"
    assert checkpoint.latest(out / "checkpoints") is not None
    assert worker.proc.poll() is None, "the worker goes on serving after a cancel"


def test_no_rank_outlives_a_killed_worker(executor_service, start_worker, tiny_model, counting_data):
    worker = start_worker("host-a")
    plan = _plan(tiny_model, counting_data, "fleet-orphan", max_steps=100_000, ranks=2)
    with ExecutorClient(executor_service.address, timeout_s=60) as client:
        client.submit(plan)
        seen = _until(client, "fleet-orphan", progress_pb2.PHASE_TRAINING)
        assert seen[-1].phase == progress_pb2.PHASE_TRAINING, seen[-1].message
    out = worker.work_dir / "fleet-orphan"
    tree = run_processes(out)
    ranks = [p for p in tree if RANK_MODULE in p.cmdline() and "torch.distributed.run" not in
             p.cmdline()]
    assert len(ranks) == 2, "two ranks run"
    worker.proc.kill()  # the worker alone: its launcher (own session), torchrun and the ranks (sessions of their own)
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert not alive, f"processes outlived their worker: {[(p.pid, p.cmdline()[:4]) for p in alive]}"


def test_a_job_no_worker_serves_waits_with_a_reason_and_cancels_while_queued(executor_service, start_worker,
                                                                               tiny_model, counting_data):
    start_worker("host-a")  # serves cpu only
    plan = _plan(tiny_model, counting_data, "fleet-a100")
    plan.hardware.gpu = "a100-80gb"
    with ExecutorClient(executor_service.address) as client:
        job = client.submit(plan, executor_pb2.PRIORITY_HIGH).job
        assert job.queue == "tunefleet.a100-80gb.high" and job.phase == progress_pb2.PHASE_QUEUED
        fleet = client.fleet()
        waiting = [p for p in fleet.pending if p.job_id == "fleet-a100"]
        assert waiting and "no registered host has a100-80gb" in waiting[0].reason
        assert {(q.queue, q.depth) for q in fleet.queues} >= {("tunefleet.a100-80gb.high", 1)}
        assert client.get("fleet-a100").phase == progress_pb2.PHASE_QUEUED

        cancelled = client.cancel("fleet-a100")
        assert cancelled.phase == progress_pb2.PHASE_CANCELLED
        assert [e.phase for e in _events(client.watch("fleet-a100"))] == [progress_pb2.PHASE_QUEUED,
                                                                         progress_pb2.PHASE_CANCELLED]
        assert not [p for p in client.fleet().pending if p.job_id == "fleet-a100"]
        assert client.cancel("fleet-a100").phase == progress_pb2.PHASE_CANCELLED  # idempotent


def test_watch_on_trimmed_history_says_so_then_replays_what_is_kept(start_service, tiny_model, counting_data):
    service = start_service(events_max_len=3)
    plan = _plan(tiny_model, counting_data, "fleet-trim")
    plan.hardware.gpu = "a100-80gb"  # no worker: the test publishes the run's events itself, as a worker would
    with ExecutorClient(service.address) as client:
        client.submit(plan)
        log = EventLog(service.executor.connection)
        for seq in range(2, 9):
            phase = progress_pb2.PHASE_DONE if seq == 8 else progress_pb2.PHASE_TRAINING
            assert log.publish(progress_pb2.ProgressEvent(job_id="fleet-trim", sequence=seq, phase=phase, step=seq))
        assert not log.publish(progress_pb2.ProgressEvent(job_id="fleet-trim", sequence=5, step=5))  # no repeats
        responses = list(client.watch("fleet-trim"))
        assert responses[0].WhichOneof("kind") == "history_trimmed"
        assert responses[0].history_trimmed.first_available_sequence == 6
        assert [r.event.sequence for r in responses[1:]] == [6, 7, 8]
        assert [r.event.sequence for r in client.watch("fleet-trim", after_sequence=6)] == [7, 8]  # not trimmed


def test_watch_sends_heartbeats_on_an_idle_stream(executor_service, tiny_model, counting_data):
    plan = _plan(tiny_model, counting_data, "fleet-idle")
    plan.hardware.gpu = "a100-80gb"
    with ExecutorClient(executor_service.address) as client:
        client.submit(plan)
        kinds = []
        for r in client.watch("fleet-idle"):
            kinds.append(r.WhichOneof("kind"))
            if kinds.count("heartbeat") == 2:
                break
        assert kinds == ["event", "heartbeat", "heartbeat"]


def _violation(exc: grpc.RpcError) -> str:
    status = rpc_status.from_call(exc)
    assert status is not None
    bad = error_details_pb2.BadRequest()
    status.details[0].Unpack(bad)
    return bad.field_violations[0].field


def test_bad_requests_get_clear_status_codes(executor_service, tiny_model, counting_data):
    channel = grpc.insecure_channel(executor_service.address)
    raw_submit = channel.unary_unary("/tunefleet.v1.ExecutorService/Submit")
    with pytest.raises(grpc.RpcError) as malformed:
        raw_submit(b"\x0a\xff\xff\xff\xff\x0f", timeout=10)
    assert malformed.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    stub = executor_pb2_grpc.ExecutorServiceStub(channel)
    plan = _plan(tiny_model, counting_data, "fleet-bad")
    plan.training.sequence_length = 0
    with pytest.raises(grpc.RpcError) as invalid:
        stub.Submit(executor_pb2.SubmitRequest(plan=plan), timeout=10)
    assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _violation(invalid.value) == "training.sequence_length"

    plan = _plan(tiny_model, counting_data, "fleet-bad")
    plan.hardware.gpu = "no-such-gpu"
    with pytest.raises(grpc.RpcError) as gpu:
        stub.Submit(executor_pb2.SubmitRequest(plan=plan), timeout=10)
    assert gpu.value.code() == grpc.StatusCode.INVALID_ARGUMENT and _violation(gpu.value) == "hardware.gpu"

    with ExecutorClient(executor_service.address) as client:
        for call in (lambda: client.get("nope"), lambda: client.cancel("nope"), lambda: list(client.watch("nope"))):
            with pytest.raises(NotFound, match="no job 'nope'"):
                call()
        with pytest.raises(InvalidArgument) as token:
            client.list_jobs(page_token="garbage")
        assert token.value.violations[0].field == "page_token"
    channel.close()


def test_calls_without_the_token_are_unauthenticated(start_service, tiny_model, counting_data):
    service = start_service(token=TOKEN)
    plan = _plan(tiny_model, counting_data, "fleet-auth")
    with ExecutorClient(service.address) as anonymous:
        with pytest.raises(Unauthenticated):
            anonymous.submit(plan)
        with pytest.raises(Unauthenticated):
            list(anonymous.watch("fleet-auth"))
    with ExecutorClient(service.address, token=TOKEN) as client:
        assert client.submit(plan).created


def test_list_pages_through_every_job_once_and_filters(executor_service, tiny_model, counting_data):
    with ExecutorClient(executor_service.address) as client:
        for i in range(5):
            plan = _plan(tiny_model, counting_data, f"fleet-list-{i}")
            plan.hardware.gpu = "a100-80gb" if i % 2 else "l4"
            client.submit(plan)
        client.cancel("fleet-list-0")
        pages, token = [], ""
        while True:
            page = client.list_jobs(page_size=2, page_token=token)
            pages.append([j.job_id for j in page.jobs])
            token = page.next_page_token
            if not token:
                break
        assert [len(p) for p in pages] == [2, 2, 1]
        assert sum(pages, []) == [f"fleet-list-{i}" for i in reversed(range(5))]  # newest first, each once
        assert not any(j.HasField("plan") for j in client.list_jobs().jobs), "List leaves the plans out"
        a100 = [j.job_id for j in client.jobs(gpu_class="a100-80gb")]
        assert a100 == ["fleet-list-3", "fleet-list-1"]
        assert [j.job_id for j in client.jobs(phases=[progress_pb2.PHASE_CANCELLED])] == ["fleet-list-0"]
        with pytest.raises(InvalidArgument) as big:
            client.list_jobs(page_size=100_000)
        assert big.value.violations[0].field == "page_size"


def test_the_service_exposes_prometheus_metrics(executor_service, tiny_model, counting_data):
    import urllib.request

    from common.metrics import metrics_endpoint

    plan = _plan(tiny_model, counting_data, "fleet-metrics")
    plan.hardware.gpu = "a100-80gb"
    with ExecutorClient(executor_service.address) as client:
        client.submit(plan)
        with pytest.raises(NotFound):
            client.get("missing")
    with metrics_endpoint("127.0.0.1:0") as port:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert 'tunefleet_rpc_total{code="OK",method="/tunefleet.v1.ExecutorService/Submit"}' in text
    assert 'tunefleet_rpc_total{code="NOT_FOUND",method="/tunefleet.v1.ExecutorService/Get"}' in text
    assert 'tunefleet_queue_depth{queue="tunefleet.a100-80gb.normal"} 1.0' in text
    assert 'tunefleet_jobs{phase="queued"} 1.0' in text


def test_a_stopping_worker_requeues_its_job_and_another_resumes_it(executor_service, start_worker, tiny_model,
                                                                  counting_data, tmp_path):
    first = start_worker("host-a")
    out = tmp_path / "shared" / "fleet-requeue"  # storage both hosts see
    plan = _plan(tiny_model, counting_data, "fleet-requeue", max_steps=60)  # no periodic checkpoints
    plan.output_uri = str(out)
    with ExecutorClient(executor_service.address, timeout_s=60) as client:
        client.submit(plan)
        seen = _until(client, "fleet-requeue", progress_pb2.PHASE_TRAINING)
        assert seen[-1].phase == progress_pb2.PHASE_TRAINING
        assert first.stop() == 0, first.log.read_text()[-2000:]  # SIGTERM: drain (checkpoint, requeue), exit
        job = client.get("fleet-requeue")
        assert job.phase == progress_pb2.PHASE_QUEUED and "shutting down" in job.last_event.message
        assert not run_processes(out), "the run outlived its stopped worker"
        saved = checkpoint.latest(out / "checkpoints")
        assert saved is not None and saved[0].step == job.last_event.step > 0, "the drain writes a checkpoint"

        start_worker("host-b")
        rest = _events(client.watch("fleet-requeue", after_sequence=job.last_event.sequence))
        assert client.get("fleet-requeue").host_id == "host-b"
    resumed = [e for e in rest if e.phase == progress_pb2.PHASE_LOADING and "resumed from" in e.message]
    assert rest[-1].phase == progress_pb2.PHASE_DONE and rest[-1].step == 60, rest[-1].message
    assert resumed and resumed[0].step >= saved[0].step


def test_the_watch_client_reconnects_across_a_service_restart_and_misses_nothing(redis_url, tiny_model,
                                                                                   counting_data):
    from executor.service.server import connect, create_server
    from executor.service.servicer import ExecutorConfig

    def serve(address: str):  # type: ignore[no-untyped-def]
        executor = connect(redis_url, ExecutorConfig(heartbeat_interval_s=0.2))
        server, port, _ = create_server(address, executor)
        server.start()
        return server, port, executor

    server, port, executor = serve("127.0.0.1:0")
    address = f"127.0.0.1:{port}"
    plan = _plan(tiny_model, counting_data, "fleet-restart")
    plan.hardware.gpu = "a100-80gb"  # no worker: the test publishes the run's events as a worker would
    client = ExecutorClient(address)
    client.submit(plan)
    log = EventLog(executor.connection)
    received: list[progress_pb2.ProgressEvent] = []
    got_two = threading.Event()

    def watch() -> None:
        for r in client.watch("fleet-restart", reconnect_timeout_s=60):
            if r.HasField("event"):
                received.append(r.event)
                if r.event.sequence == 2:
                    got_two.set()
    watcher = threading.Thread(target=watch)
    watcher.start()
    log.publish(progress_pb2.ProgressEvent(job_id="fleet-restart", sequence=2, phase=progress_pb2.PHASE_LOADING))
    assert got_two.wait(30)
    server.stop(0).wait()
    executor.close()
    log.publish(progress_pb2.ProgressEvent(job_id="fleet-restart", sequence=3, phase=progress_pb2.PHASE_TRAINING))
    server, _, executor = serve(address)  # the same address again
    log.publish(progress_pb2.ProgressEvent(job_id="fleet-restart", sequence=4, phase=progress_pb2.PHASE_DONE))
    watcher.join(60)
    server.stop(0).wait()
    executor.close()
    assert not watcher.is_alive()
    assert [e.sequence for e in received] == [1, 2, 3, 4]


def test_submit_from_recommend_queues_the_cheapest_option_on_its_gpu_class(executor_service, tiny_model,
                                                                           counting_data):
    cli = [sys.executable, "-m", "launch", "submit", "--executor", executor_service.address, "--json"]
    proc = subprocess.run([*cli, "--from-recommend", "--model", str(tiny_model), "--method", "lora", "--seq-len", "256",
                           "--tokens", "100k", "--dataset", str(counting_data)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)["job"]
    assert json.loads(proc.stdout)["created"] and job["phase"] == "PHASE_QUEUED"
    assert job["queue"].startswith("tunefleet.") and job["queue"].endswith(".normal")
    assert job["queue"] != "tunefleet.cpu.normal", "a recommended plan names a catalog GPU class"
    neither = subprocess.run(cli, capture_output=True, text=True, timeout=60)
    assert neither.returncode == 2 and "give a plan file" in neither.stderr


def test_plans_that_would_write_outside_the_workers_roots_are_refused(executor_service, start_worker, tiny_model,
                                                                      counting_data, tmp_path):
    """Issue 9, item 9: `/`, `file:///etc` or `../../..` as output would have had a worker (root, in a
    container) write there."""
    with ExecutorClient(executor_service.address) as client:
        climbing = _plan(tiny_model, counting_data, "climb")
        climbing.output_uri = "../../../etc"
        with pytest.raises(InvalidArgument) as info:
            client.submit(climbing)
        assert info.value.violations[0].field == "output_uri"

        outside = tmp_path.parent.parent / "tunefleet-escape"  # outside the workers' roots (the test's tmp dirs)
        escaping = _plan(tiny_model, counting_data, "escape")
        escaping.output_uri = f"file://{outside}"
        client.submit(escaping)
        start_worker("host-a")
        events = _until(client, "escape", progress_pb2.PHASE_FAILED)
        assert events[-1].phase == progress_pb2.PHASE_FAILED
        assert "output_uri" in events[-1].message and "outside this host's output roots" in events[-1].message
        assert not outside.exists()


def test_a_job_can_never_write_into_another_jobs_output_its_data_or_the_work_dir(executor_service, start_worker,
                                                                                tiny_model, counting_data):
    """Issue 23, item 1: a plan whose output was another job's directory, a checkpoint inside it, or the model
    folder it reads used to overwrite their files (the worker wrote plan.json before any check)."""
    worker = start_worker("host-a")
    finished = worker.work_dir / "ok-1"
    claim_output(finished, "ok-1")
    (finished / "checkpoints" / "step-00000008").mkdir(parents=True)
    (finished / "plan.json").write_text("{}")
    (finished / "progress.jsonl").write_text('{"sequence": 1}\n')
    before = {p: p.read_bytes() for p in finished.rglob("*") if p.is_file()}
    model_before = {p: p.read_bytes() for p in tiny_model.rglob("*") if p.is_file()}
    with ExecutorClient(executor_service.address) as client:
        for job_id, output in (("into-other", "ok-1"), ("into-checkpoint", "ok-1/checkpoints/step-00000008"),
                               ("into-model", str(tiny_model))):
            client.submit(_with_output(_plan(tiny_model, counting_data, job_id), output))
            events = _until(client, job_id, progress_pb2.PHASE_FAILED)
            assert events[-1].phase == progress_pb2.PHASE_FAILED, events[-1]
            assert "output_uri" in events[-1].message, events[-1].message
        with pytest.raises(InvalidArgument) as info:
            client.submit(_with_output(_plan(tiny_model, counting_data, "into-root"), "."))
        assert info.value.violations[0].field == "output_uri"
    assert {p: p.read_bytes() for p in finished.rglob("*") if p.is_file()} == before
    assert {p: p.read_bytes() for p in tiny_model.rglob("*") if p.is_file()} == model_before
    assert not (worker.work_dir / "plan.json").exists()


def _with_output(plan: plan_pb2.Plan, output: str) -> plan_pb2.Plan:
    plan.output_uri = output
    return plan

"""Pure parts of the fleet: queue names and timeouts, GPU classes from NVML names, plan routing, incremental
progress reading, page tokens."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tunefleet.v1 import executor_pb2, hardware_pb2, progress_pb2

from common.units import GiB
from contract.errors import PlanError
from contract.progress import JsonlProgressSink, ProgressTail, event_to_json
from executor.worker.control import what_is_kept
from fleet import queues
from fleet.jobs import PageCursor, decode_page_token, encode_page_token
from fleet.record import FIELDS, JobRecord, field_names
from planner.catalog import default_catalog
from planner.classify import gpu_class_for, plan_gpu_class


@pytest.mark.parametrize(("predicted_s", "expected_s"), [
    (0.0, queues.DEFAULT_JOB_TIMEOUT_S), (float("nan"), queues.DEFAULT_JOB_TIMEOUT_S),
    (-5.0, queues.DEFAULT_JOB_TIMEOUT_S), (float("inf"), queues.DEFAULT_JOB_TIMEOUT_S),
    (3600.0, 3 * 3600 + queues.JOB_TIMEOUT_STARTUP_S), (10.0, 30 + queues.JOB_TIMEOUT_STARTUP_S),
])
def test_job_timeout_is_the_prediction_times_the_margin_plus_startup(predicted_s: float, expected_s: int) -> None:
    assert queues.job_timeout_s(predicted_s) == expected_s
    assert queues.job_timeout_s(predicted_s) > 180, "rq's default would kill real jobs"


def test_queue_names_round_trip_and_a_worker_listens_highest_tier_first() -> None:
    assert queues.QueueRef("a100-80gb", executor_pb2.PRIORITY_HIGH).name == "tunefleet.a100-80gb.high"
    assert [q.name for q in queues.QueueRef.of_class("cpu")] == ["tunefleet.cpu.high", "tunefleet.cpu.normal",
                                                                  "tunefleet.cpu.low"]
    assert [q.tier for q in queues.QueueRef.of_class("cpu")] == [0, 1, 2]
    for ref in queues.QueueRef.of_class("h100-sxm-80gb"):
        assert queues.QueueRef.parse(ref.name) == ref
    assert queues.QueueRef.parse("tunefleet.rtx-4090-24gb.low") == queues.QueueRef("rtx-4090-24gb",
                                                                                     executor_pb2.PRIORITY_LOW)
    assert queues.QueueRef.parse("default") is None
    assert queues.QueueRef.parse("tunefleet.cpu.urgent") is None


@pytest.mark.parametrize(("nvml_name", "memory_gib", "gpu_class"), [
    ("NVIDIA GeForce RTX 4090", 23.99, "rtx-4090-24gb"),
    ("NVIDIA A100-SXM4-80GB", 79.15, "a100-80gb"),
    ("NVIDIA A100-SXM4-40GB", 39.4, "a100-40gb"),
    ("NVIDIA H100 80GB HBM3", 79.6, "h100-sxm-80gb"),
    ("NVIDIA H100 PCIe", 79.6, "h100-pcie-80gb"),
    ("NVIDIA H100 NVL", 93.0, "h100-nvl-94gb"),
    ("Tesla T4", 15.0, "t4-16gb"),
    ("NVIDIA L4", 22.5, "l4-24gb"),
    ("NVIDIA A10G", 22.5, "a10g-24gb"),
    ("Some Future GPU", 100.0, "some-future-gpu"),
])
def test_gpu_class_from_the_nvml_device_name_and_memory(nvml_name: str, memory_gib: float, gpu_class: str) -> None:
    assert gpu_class_for(nvml_name, int(memory_gib * GiB), default_catalog()) == gpu_class


def test_a_plan_is_routed_to_its_gpu_class_or_refused_naming_the_field() -> None:
    catalog = default_catalog()
    assert plan_gpu_class(hardware_pb2.HardwareSpec(gpu="cpu"), catalog) == "cpu"
    assert plan_gpu_class(hardware_pb2.HardwareSpec(gpu="A100 80GB"), catalog) == "a100-80gb"
    assert plan_gpu_class(hardware_pb2.HardwareSpec(gpu="h100 sxm"), catalog) == "h100-sxm-80gb"
    with pytest.raises(PlanError) as ambiguous:  # issue 23, item 11: used to pick the SXM model silently
        plan_gpu_class(hardware_pb2.HardwareSpec(gpu="h100"), catalog)
    assert ambiguous.value.field == "hardware.gpu" and "h100-pcie-80gb" in ambiguous.value.description
    flavor = next(f for f in catalog.flavors if f.gpu_count)
    assert plan_gpu_class(hardware_pb2.HardwareSpec(flavor=flavor.name), catalog) == catalog.gpu(flavor.gpu).name
    cpu_flavor = next(f for f in catalog.flavors if not f.gpu_count)
    assert plan_gpu_class(hardware_pb2.HardwareSpec(flavor=cpu_flavor.name), catalog) == "cpu"
    with pytest.raises(PlanError) as unknown:
        plan_gpu_class(hardware_pb2.HardwareSpec(gpu="a1000-80gb"), catalog)
    assert unknown.value.field == "hardware.gpu"
    with pytest.raises(PlanError) as empty:
        plan_gpu_class(hardware_pb2.HardwareSpec(), catalog)
    assert empty.value.field == "hardware.gpu"


def test_progress_tail_returns_only_new_complete_events(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    tail = ProgressTail(path)
    assert tail.read_new() == []
    sink = JsonlProgressSink(path, "job", start_after=7)
    sink.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_LOADING))
    assert [e.sequence for e in tail.read_new()] == [8]
    assert tail.read_new() == []
    sink.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_TRAINING, step=1))
    sink.close()
    half = event_to_json(progress_pb2.ProgressEvent(job_id="job", sequence=10, step=2))
    with path.open("a") as f:
        f.write(half[: len(half) // 2])  # a writer caught mid-line
    assert [e.sequence for e in tail.read_new()] == [9]
    with path.open("a") as f:
        f.write(half[len(half) // 2:] + "\n")
    assert [(e.sequence, e.step) for e in tail.read_new()] == [(10, 2)]


def test_page_tokens_round_trip_name_no_job_and_foreign_ones_name_the_field() -> None:
    cursor = PageCursor(1700000000123, 3)
    assert decode_page_token(encode_page_token(cursor)) == cursor
    assert encode_page_token(cursor) == "1700000000123:3", "a position, no job id"
    assert cursor.past(1700000000123) == PageCursor(1700000000123, 4) and cursor.past(5) == PageCursor(5, 1)
    assert decode_page_token("") is None
    for bad in ("garbage", "12:", "x1:plan", ":plan", "²:x", "12:plan-a", "1:" + "9" * 30, "١٢:3"):
        with pytest.raises(PlanError) as e:
            decode_page_token(bad)
        assert e.value.field == "page_token"


def test_a_progress_file_continues_after_its_highest_sequence_not_its_last_line(tmp_path: Path) -> None:
    """Issue 23, item 11: an older event appended last (a stale writer) made the next event repeat a sequence."""
    path = tmp_path / "progress.jsonl"
    path.write_text("".join(event_to_json(progress_pb2.ProgressEvent(job_id="job", sequence=n)) + "\n"
                            for n in (5, 9, 3)))
    sink = JsonlProgressSink(path, "job")
    assert sink.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_LOADING)).sequence == 10
    sink.close()


def test_a_stopped_run_says_whether_it_left_a_checkpoint(tmp_path: Path) -> None:
    """Issue 23, item 11: Cancel said "checkpoints kept in …/checkpoints" when none existed."""
    assert "no checkpoint had been written" in what_is_kept(tmp_path)
    (tmp_path / "checkpoints" / "step-00000004").mkdir(parents=True)
    assert what_is_kept(tmp_path) == f"checkpoints kept in {tmp_path / 'checkpoints'}"


def test_a_job_record_reads_typed_from_a_hash_whole_or_in_part() -> None:
    event = progress_pb2.ProgressEvent(step=7, eta_s=12.5).SerializeToString()
    record = JobRecord.parse("j", {b"schema": b"1", b"phase": str(progress_pb2.PHASE_TRAINING).encode(),
                                   b"queue": b"tunefleet.a100-80gb.high", b"gpus": b"4", b"nodes": b"2",
                                   b"predicted_s": b"100.5", b"predicted_low_s": b"", b"preempt_requested": b"1",
                                   b"last_event": event, b"a_field_of_a_newer_schema": b"x"})
    assert (record.job_id, record.phase, record.total_gpus, record.preempt_requested) == (
        "j", progress_pb2.PHASE_TRAINING, 8, True)
    assert record.predicted == (100.5, 100.5, 100.5), "a range not stored is the most likely figure"
    assert record.queue_ref == queues.QueueRef("a100-80gb", executor_pb2.PRIORITY_HIGH) and record.last.step == 7
    assert JobRecord.parse("k", {b"team": b"nlp"}) == JobRecord("k", team="nlp"), "fields not read keep defaults"
    assert field_names("team", "phase") == ("team", "phase")
    with pytest.raises(ValueError, match="not fields of the job record"):
        field_names("team", "teams")


def test_the_lua_scripts_on_a_job_hash_name_only_fields_of_the_record() -> None:
    """The scripts that read and write a job's hash (its claim, renewal and release, a holder's write, an event's
    publish) name its fields as fleet.record.JobRecord does: a field renamed on one side fails here."""
    from fleet import events, jobs, leases

    scripts = {"claim": leases._CLAIM, "release": leases._RELEASE, "holder write": jobs._HOLDER_WRITE,
               "publish": events._PUBLISH}
    # a quoted lower-case word is a field, but for a word the script returns and the event stream's own field
    named = {name: set(re.findall(r"'([a-z_]+)'", re.sub(r"return '[a-z_]+'", "", script)))
             - {events.EVENT_FIELD.decode()} for name, script in scripts.items()}
    assert named["claim"] >= {"phase", "fence", "host_id", "hold_from_step", "checkpoint_step"}, "the scan reads them"
    unknown = {name: sorted(fields - set(FIELDS)) for name, fields in named.items() if fields - set(FIELDS)}
    assert not unknown, f"fields the record does not have: {unknown}"


_HASH_WRITES = {"hset", "hsetnx", "hincrby", "hincrbyfloat", "hdel"}
_LUA_WRITE = re.compile(r"redis\.call\('(?:HSET|HSETNX|HINCRBY|HINCRBYFLOAT|HDEL)', KEYS\[1\],([^)]*)\)")


def _job_hash_writes(path: Path) -> set[str]:
    """The job-hash fields a fleet module writes: in a redis-py write (hset, hincrby, ...) whose key is job_key(...) or
    a name the same function assigned from it, its literal field names and mapping keys, a module-level tuple of
    names it spreads (its own or imported), and the literal keys of what it hands JobStore's fenced holder write."""
    import ast
    import importlib

    tree = ast.parse(path.read_text())
    module = vars(importlib.import_module(f"fleet.{path.stem}"))
    tuples = {name: value for name, value in module.items()
              if isinstance(value, tuple) and value and all(isinstance(v, str) for v in value)}
    written: set[str] = set()

    def is_job_key(node: ast.AST, names: set[str]) -> bool:
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "job_key") or \
            (isinstance(node, ast.Name) and node.id in names)

    for function in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        names = {t.id for n in ast.walk(function) if isinstance(n, ast.Assign) and is_job_key(n.value, set())
                 for t in n.targets if isinstance(t, ast.Name)}
        for call in [n for n in ast.walk(function) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]:
            holder = call.func.attr == "_as_holder"
            if not holder and not (call.func.attr in _HASH_WRITES and call.args and is_job_key(call.args[0], names)):
                continue
            for node in [x for arg in (*call.args[1:], *(k.value for k in call.keywords)) for x in ast.walk(arg)]:
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in FIELDS:
                    written.add(node.value)
                elif isinstance(node, ast.Name) and node.id in tuples:
                    written.update(tuples[node.id])
    return written


def test_each_job_hash_field_is_written_only_by_the_modules_the_record_names() -> None:
    """fleet.record.WRITERS says which modules of fleet/ write each field of a job's hash after Submit created it;
    every write found in fleet/ (redis-py calls and the Lua scripts on a job's hash) is one the table allows."""
    from fleet import events, leases, record

    fleet_dir = Path(record.__file__).parent
    writes = {path.stem: _job_hash_writes(path) for path in fleet_dir.glob("*.py")}
    for module, script in (("leases", leases._CLAIM), ("leases", leases._RELEASE), ("events", events._PUBLISH)):
        script = re.sub(r"redis\.call\('HGET', KEYS\[1\], '[a-z_]+'\)", "", script)  # a read inside a write
        for arguments in _LUA_WRITE.findall(script):
            writes[module].update(set(re.findall(r"'([a-z_]+)'", arguments)) & set(FIELDS))
    assert {"phase", "fence", "host_id"} <= writes["leases"] and {"phase", "last_event"} <= writes["events"], \
        "the scan finds the claim's and the publish's writes"
    assert {"spent_usd", "budget_stop", "retry_at_ms", "cancel_reason", "plan", "error"} <= \
        set().union(*writes.values())
    strays = {module: sorted(f for f in fields if module not in record.WRITERS[f])
              for module, fields in writes.items() if any(module not in record.WRITERS[f] for f in fields)}
    assert not strays, f"writes fleet.record.WRITERS does not give these modules: {strays}"
    unwritten = {f for f, modules in record.WRITERS.items() if modules} - set().union(*writes.values())
    assert not unwritten, f"WRITERS names writers of fields nothing writes: {sorted(unwritten)}"

"""Issue 9: randomised and mutated requests against real `tunefleet serve` processes, for every RPC of both
services (hypothesis strategies built from the protos, valid requests with random fields merged in, and
byte-level mutation of valid requests), and mutated plan files against `train --check`'s parser.

Each call must end before its deadline with a status tunefleet chose (never INTERNAL or UNKNOWN), the servers'
memory must stay bounded, and both must answer health checks afterwards. Counts by status code are printed
(pytest -s) for the record. Derandomised, so CI runs the same cases every time."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tunefleet.v1 import executor_pb2, model_pb2, planner_pb2, training_pb2

from contract.errors import PlanError
from contract.run_config import parse_plan, run_config_from_plan
from devtools.tiny import make_plan
from tests.integration.conftest import serve_process

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
CALL_DEADLINE_S = 20.0
RSS_GROWTH_LIMIT_BYTES = 150 * 1024 * 1024
EXAMPLES = 120
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
NAMES = ["a100-80gb", "rtx-4090", "a10g-large", "Qwen/Qwen2.5-7B", "q_proj", "all-linear", "", "x" * 300,
         "../../etc/passwd", "\x00", "ünïcödé", "job-1"]
INTS = {FieldDescriptor.TYPE_UINT32: [0, 1, 2, 7, 2 ** 31 - 1, 2 ** 32 - 1],
        FieldDescriptor.TYPE_UINT64: [0, 1, 8, 2 ** 32, 2 ** 63 - 1, 2 ** 64 - 1],
        FieldDescriptor.TYPE_INT32: [0, 1, -1, 2 ** 31 - 1, -(2 ** 31)],
        FieldDescriptor.TYPE_INT64: [0, 1, -1, 2 ** 63 - 1, -(2 ** 63)]}


def _scalar(fd: FieldDescriptor) -> st.SearchStrategy[Any]:
    if fd.type in INTS:
        edges = INTS[fd.type]
        return st.one_of(st.sampled_from(edges), st.integers(min(edges), max(edges)))
    if fd.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=64 if fd.type == FieldDescriptor.TYPE_DOUBLE
                         else 32)
    if fd.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if fd.type == FieldDescriptor.TYPE_ENUM:
        return st.integers(-1, len(fd.enum_type.values) + 2)
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=64)
    return st.one_of(st.sampled_from(NAMES), st.text(max_size=40), st.just("{" * 2000))


@st.composite
def messages(draw: st.DrawFn, descriptor: Descriptor, depth: int = 0) -> dict[str, Any]:
    """A random value for some of the message's fields, as {field name: value} (messages as dicts)."""
    fields: dict[str, Any] = {}
    for fd in descriptor.fields:
        if not draw(st.booleans()):
            continue
        if fd.containing_oneof is not None and any(o.name in fields for o in fd.containing_oneof.fields):
            continue
        if fd.message_type is not None:
            if depth >= 3 or fd.message_type.GetOptions().map_entry or fd.message_type.full_name.startswith(
                    "google."):
                continue
            one = messages(fd.message_type, depth + 1)
        else:
            one = _scalar(fd)
        fields[fd.name] = draw(st.lists(one, max_size=6) | st.lists(one, min_size=60, max_size=70)) \
            if fd.is_repeated else draw(one)
    return fields


def _fill(message: Message, fields: dict[str, Any]) -> Message:
    for name, value in fields.items():
        fd = message.DESCRIPTOR.fields_by_name[name]
        target = getattr(message, name)
        try:
            if fd.message_type is not None and fd.is_repeated:
                for item in value:
                    _fill(target.add(), item)
            elif fd.message_type is not None:
                _fill(target, value)
            elif fd.is_repeated:
                target.extend(value)
            else:
                setattr(message, name, value)
        except (ValueError, TypeError):  # a value protobuf itself refuses to hold (an unknown closed enum)
            continue
    return message


def requests(cls: type[Message], valid: Message) -> st.SearchStrategy[Message]:
    """Wholly random requests, and a valid request with random fields merged over it (to get past the first
    check and reach the domain code)."""
    def build(fields: dict[str, Any], over_valid: bool) -> Message:
        message = cls()
        if over_valid:
            message.CopyFrom(valid)
        random_part = _fill(cls(), fields)
        message.MergeFrom(random_part)
        return message
    return st.builds(build, messages(cls.DESCRIPTOR), st.booleans())


def _mutations(data: bytes, rng: random.Random, n: int) -> Iterator[bytes]:
    for _ in range(n):
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            kind, at = rng.randrange(4), rng.randrange(max(1, len(b)))
            if kind == 0 and b:
                b[at] ^= 1 << rng.randrange(8)
            elif kind == 1:
                b[at:at] = rng.randbytes(rng.randint(1, 16))
            elif kind == 2:
                del b[at:at + rng.randint(1, 16)]
            else:
                b[at:at] = b"\xff\xff\xff\xff\x0f"  # a huge length prefix
        yield bytes(b)


class Probe:
    """Calls one server, tallies status codes, and fails on any that tunefleet never chooses."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.codes: Counter[str] = Counter()

    def unary(self, method: str, request: bytes) -> None:
        call = self.channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        try:
            call(request, timeout=CALL_DEADLINE_S)
            self.codes["OK"] += 1
        except grpc.RpcError as e:
            self._record(method, e)

    def stream(self, method: str, request: bytes) -> None:
        call = self.channel.unary_stream(method, request_serializer=None, response_deserializer=None)
        try:
            for _ in call(request, timeout=0.5):  # Watch streams until the job ends: a live job runs out the clock
                pass
            self.codes["OK"] += 1
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                self.codes["OK (streaming until its deadline)"] += 1
                return
            self._record(method, e)

    def _record(self, method: str, e: grpc.RpcError) -> None:
        code = e.code()
        assert code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), (method, code, e.details())
        assert code != grpc.StatusCode.DEADLINE_EXCEEDED, f"{method} hung past {CALL_DEADLINE_S} s"
        self.codes[code.name] += 1

    def healthy(self) -> bool:
        reply = health_pb2_grpc.HealthStub(self.channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        return reply.status == health_pb2.HealthCheckResponse.SERVING


def _rss(proc: psutil.Process) -> int:
    return int(proc.memory_info().rss)


@pytest.fixture()
def planner() -> Iterator[tuple[Probe, psutil.Process]]:
    proc, address = serve_process("planner", "--drain-delay-s", "0")
    probe = Probe(address)
    yield probe, psutil.Process(proc.pid)
    probe.channel.close()
    proc.terminate()
    proc.wait(timeout=60)


@pytest.fixture()
def executor(redis_url: str) -> Iterator[tuple[Probe, psutil.Process]]:
    proc, address = serve_process("executor.service", "--redis", redis_url, "--drain-delay-s", "0")
    probe = Probe(address)
    yield probe, psutil.Process(proc.pid)
    probe.channel.close()
    proc.terminate()
    proc.wait(timeout=60)


PLANNER = "/tunefleet.v1.PlannerService/"
EXECUTOR = "/tunefleet.v1.ExecutorService/"
VALID_FIT = planner_pb2.FitRequest(model=model_pb2.ModelRef(catalog_name="Qwen/Qwen2.5-0.5B"),
                                   training=training_pb2.TrainingSpec(method=training_pb2.METHOD_LORA),
                                   hardware={"gpu": "a10g"})
VALID_ESTIMATE = planner_pb2.EstimateRequest(model=VALID_FIT.model, training=VALID_FIT.training,
                                             hardware=VALID_FIT.hardware,
                                             workload=training_pb2.WorkloadSpec(dataset_tokens=1_000_000))
VALID_RECOMMEND = planner_pb2.RecommendRequest(model=VALID_FIT.model, training=VALID_FIT.training,
                                               workload=VALID_ESTIMATE.workload,
                                               constraints=planner_pb2.Constraints(allowed_gpus=["a10g", "l4"]))
PLANNER_RPCS: list[tuple[str, type[Message], Message]] = [
    ("Fit", planner_pb2.FitRequest, VALID_FIT), ("Estimate", planner_pb2.EstimateRequest, VALID_ESTIMATE),
    ("Recommend", planner_pb2.RecommendRequest, VALID_RECOMMEND),
    ("ListHardware", planner_pb2.ListHardwareRequest, planner_pb2.ListHardwareRequest(provider="aws")),
    ("ListModels", planner_pb2.ListModelsRequest, planner_pb2.ListModelsRequest())]


def _fuzz(probe: Probe, prefix: str, rpcs: list[tuple[str, type[Message], Message]],
          streaming: frozenset[str] = frozenset()) -> None:
    for name, cls, valid in rpcs:
        send: Callable[[str, bytes], None] = probe.stream if name in streaming else probe.unary
        _random_requests(prefix + name, cls, valid, send)()
        for data in _mutations(valid.SerializeToString(), random.Random(name), EXAMPLES // 2):
            send(prefix + name, data)


def _random_requests(method: str, cls: type[Message], valid: Message,
                     send: Callable[[str, bytes], None]) -> Callable[[], None]:
    @SETTINGS
    @given(requests(cls, valid))
    def run(request: Message) -> None:
        send(method, request.SerializeToString())
    return run


def _fuzz_server(label: str, probe: Probe, proc: psutil.Process, prefix: str,
                 rpcs: list[tuple[str, type[Message], Message]], streaming: frozenset[str] = frozenset()) -> None:
    """Every RPC fuzzed on a warm server; its memory may not grow past the limit, and it must stay healthy."""
    name, _, valid = rpcs[0]
    probe.unary(prefix + name, valid.SerializeToString())  # warm: imports, catalog, caches, connections
    before = _rss(proc)
    _fuzz(probe, prefix, rpcs, streaming)
    grown = _rss(proc) - before
    print(f"\n{label} fuzz: {sum(probe.codes.values())} calls by status {dict(probe.codes.most_common())}; "
          f"RSS {before / 2**20:.0f} -> {(before + grown) / 2**20:.0f} MiB")
    assert probe.codes["INVALID_ARGUMENT"] > 0 and probe.codes["OK"] > 0
    assert grown < RSS_GROWTH_LIMIT_BYTES
    assert probe.healthy()


def test_random_and_mutated_requests_never_crash_stall_or_bloat_the_planner(planner) -> None:
    _fuzz_server("planner", *planner, PLANNER, PLANNER_RPCS)


def _plan() -> Message:
    return make_plan(Path("/srv/m"), Path("/srv/d.jsonl"), Path("fuzz-out"), plan_id="fuzz-plan")


def test_random_and_mutated_requests_never_crash_stall_or_bloat_the_executor(executor) -> None:
    job = executor_pb2.GetRequest(job_id="fuzz-plan")
    rpcs: list[tuple[str, type[Message], Message]] = [
        ("Submit", executor_pb2.SubmitRequest, executor_pb2.SubmitRequest(plan=_plan())),
        ("Get", executor_pb2.GetRequest, job), ("List", executor_pb2.ListRequest, executor_pb2.ListRequest()),
        ("Cancel", executor_pb2.CancelRequest, executor_pb2.CancelRequest(job_id="fuzz-plan", reason="fuzz")),
        ("Fleet", executor_pb2.FleetRequest, executor_pb2.FleetRequest()),
        ("Watch", executor_pb2.WatchRequest, executor_pb2.WatchRequest(job_id="fuzz-plan"))]
    _fuzz_server("executor", *executor, EXECUTOR, rpcs, streaming=frozenset({"Watch"}))


def test_mutated_plan_files_are_refused_with_a_plan_error_only() -> None:
    """What `train --check` parses and validates (pure: the same functions, without the process)."""
    valid_json = json_format.MessageToJson(_plan()).encode()
    valid_binary = _plan().SerializeToString()
    outcomes: Counter[str] = Counter()
    rng = random.Random(9)
    for data in [*_mutations(valid_json, rng, 400), *_mutations(valid_binary, rng, 400)]:
        try:
            run_config_from_plan(parse_plan(data, "plan.json"))
            outcomes["accepted"] += 1
        except PlanError as e:
            outcomes[e.field.split(".")[0]] += 1
    print(f"\nmutated plan files: {dict(outcomes.most_common())}")
    assert sum(outcomes.values()) == 800 and outcomes["plan"] > 0  # "plan.json": the file itself


def test_train_check_exits_2_without_a_traceback_on_mutated_plan_files(tmp_path: Path) -> None:
    rng = random.Random(3)
    files = [*_mutations(json_format.MessageToJson(_plan()).encode(), rng, 2),
             *_mutations(_plan().SerializeToString(), rng, 1)]
    for i, data in enumerate(files):
        path = tmp_path / f"plan-{i}.json"
        path.write_bytes(data)
        proc = subprocess.run([sys.executable, "-m", "launch", "train", "--check", str(path)],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (data[:200], proc.stderr)

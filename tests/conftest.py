from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from common.rpc import ServerOptions, shutdown
from contract.paths import DATA_ROOTS_ENV, OUTPUT_ROOTS_ENV
from executor.training.process import prepare
from planner.server import create_server

TOKEN = "test-token"
# Nothing in the suite may come from the Hugging Face hub: models and data are built locally.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
# The suite runs a process per core (make test's xdist workers), each starting training ranks: one OpenMP thread a
# process, as torchrun gives each rank of a multi-rank node, instead of a thread per core in every process, which
# oversubscribes the cores (-38 s of CPU over test_training and test_families alone). A run started by hand keeps
# torch's default.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# torch's c10d names every address a TCPStore client connects to (c10d::detail::formatSockAddr -> getnameinfo, seen
# with strace -k), and the IPv4-mapped loopback it tries (::ffff:127.0.0.1) is not in /etc/hosts, so glibc asks DNS for
# its PTR record: 8 queries for one two-rank training test. Where the nameserver answers, each takes a millisecond;
# where it drops queries, glibc waits 5 s and asks twice. One second and one attempt bound what a CI machine's DNS can
# add to the suite's every rendezvous; the suite resolves nothing but loopback names.
os.environ.setdefault("RES_OPTIONS", "timeout:1 attempts:1")


def pytest_configure(config: pytest.Config) -> None:
    """The suite runs the training stack in its own processes too (simulations, models, DeepSpeed engines): each is set
    up as a training process is (executor.training.process), and the processes it starts inherit the environment."""
    prepare()


@pytest.fixture(scope="session", autouse=True)
def _executor_roots(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Training in the suite reads models and data, and writes runs, under pytest's temporary directory, which the
    executor's default roots (the current directory, a worker's --work-dir) would refuse; its children inherit."""
    base = str(tmp_path_factory.getbasetemp().resolve())
    os.environ[DATA_ROOTS_ENV] = base
    os.environ[OUTPUT_ROOTS_ENV] = base


@pytest.fixture(scope="session")
def planner_address() -> Iterator[str]:
    """A real PlannerService on a free loopback port for the whole session."""
    server, port, health_servicer = create_server("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    shutdown(server, health_servicer, 1.0)


@pytest.fixture()
def authed_planner() -> Iterator[str]:
    server, port, health_servicer = create_server("127.0.0.1:0", options=ServerOptions(token=TOKEN))
    server.start()
    yield f"127.0.0.1:{port}"
    shutdown(server, health_servicer, 1.0)


@pytest.fixture()
def channel(planner_address: str) -> Iterator[grpc.Channel]:
    ch = grpc.insecure_channel(planner_address)
    yield ch
    ch.close()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised two-layer Llama and a word-level tokenizer with a chat template, built locally."""
    from devtools.tiny import build_model

    return build_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture()
def counting_data(tmp_path: Path) -> Path:
    from devtools.tiny import counting_text

    return counting_text(tmp_path / "data.jsonl", records=64)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of our own on a free loopback port (never one we did not start), with nothing on disk."""
    from devtools.local_redis import RedisServerError, start_redis_server, stop_redis_server

    try:
        proc, url = start_redis_server(tmp_path_factory.mktemp("redis"))
    except RedisServerError as e:
        pytest.fail(str(e))
    yield url
    stop_redis_server(proc)


@pytest.fixture()
def redis_url(redis_server: str) -> str:
    """The session's Redis, emptied for this test (it is ours: started by redis_server)."""
    import redis

    redis.Redis.from_url(redis_server).flushall()
    return redis_server


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A real S3 API server on a free loopback port for the session (moto's server mode, which s3fs's own suite runs
    against); its buckets live in this process, so a test that stops and starts it keeps them."""
    import logging

    from moto.server import ThreadedMotoServer

    from common.net import free_port

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


S3_SECRET = "s3-secret-never-shown"  # the credentials' secret half: a test greps what users see for it


@pytest.fixture()
def s3_store(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """A fresh bucket of the S3 server, as s3://<bucket>/fleet; the endpoint and credentials in this process's
    environment (botocore's chain reads them; processes the test starts inherit them)."""
    import re

    import boto3

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "tunefleet-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", S3_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    bucket = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:50].strip("-") + "-b"
    boto3.client("s3").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/fleet"


@dataclass
class StoppableS3:
    """An S3 API server of one test's own, which it stops (an outage) and starts again with its buckets kept."""

    server: Any  # moto.server.ThreadedMotoServer
    uri: str  # s3://<bucket>/fleet on it


@pytest.fixture()
def stoppable_s3(s3_store: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[StoppableS3]:
    """s3_store's credentials, on a server of the test's own (stopping the session's would fail other tests);
    botocore tries each request once (its retries would only lengthen each failed try of tunefleet's)."""
    import boto3
    from moto.server import ThreadedMotoServer

    from common.net import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    boto3.client("s3").create_bucket(Bucket="outage")
    yield StoppableS3(server, "s3://outage/fleet")
    server.stop()


# Modules whose every test starts training processes (DeepSpeed ranks on the CPU); a test elsewhere that starts
# a fleet worker does too. They are marked `training`, and make test-fast leaves them out.
TRAINING_MODULES = {"test_training", "test_resilience", "test_dpo", "test_vision", "test_multinode", "test_simulate"}
TRAINING_FIXTURES = {"start_worker"}


# Modules whose tests run in a layered virtualenv (make torchtune-env, legacy-env, deploy-tools), and the fixture that
# drives Debian's Chromium (make chromium): marked `layered` and `browser`, and make test-fast needs neither.
LAYERED_MODULES = {"test_legacy_trainer", "test_simulate_torchtune", "test_deploy"}
BROWSER_FIXTURES = {"browser"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = item.module.__name__.rpartition(".")[2] if item.module else ""
        fixtures = set(getattr(item, "fixturenames", ()))
        if module in TRAINING_MODULES or TRAINING_FIXTURES & fixtures:
            item.add_marker(pytest.mark.training)
        if module in LAYERED_MODULES:
            item.add_marker(pytest.mark.layered)
        if BROWSER_FIXTURES & fixtures:
            item.add_marker(pytest.mark.browser)

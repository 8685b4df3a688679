from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from common.rpc import ServerOptions, shutdown
from planner.server import create_server

TOKEN = "test-token"
# Nothing in the suite may come from the Hugging Face hub: models and data are built locally.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"


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
    from tests.fixtures.tiny_llama import build_model

    return build_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture()
def counting_data(tmp_path: Path) -> Path:
    from tests.fixtures.tiny_llama import counting_text

    return counting_text(tmp_path / "data.jsonl", records=64)

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from planner.rpc import ServerOptions, shutdown
from planner.server import create_server

TOKEN = "test-token"


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

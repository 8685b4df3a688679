"""The dashboard's two services: one channel to each, shared by every session (each call carries the session's own
token), and an asyncio channel to the executor for the Watch streams behind the live pages (no thread per viewer)."""

from __future__ import annotations

from typing import Any

from tunefleet.v1 import executor_pb2_grpc

from clients.connection import Connection, aio_channel_for, channel_for
from clients.executor_client import ExecutorClient
from clients.planner_client import PlannerClient


class Backends:
    def __init__(self, executor_address: str, planner_address: str, connection: Connection) -> None:
        self.executor_address = executor_address
        self.planner_address = planner_address
        self._connection = connection
        self._executor = channel_for(executor_address, connection)
        self._planner = channel_for(planner_address, connection) if planner_address else None
        self._aio: Any = None
        self._local_planner: PlannerClient | None = None

    def executor(self, token: str) -> ExecutorClient:
        return ExecutorClient(self.executor_address, token=token, channel=self._executor)

    def planner(self, token: str) -> PlannerClient:
        """The planner service; without --planner, the planner in this process (the base install carries it)."""
        if self._planner is None:
            if self._local_planner is None:
                self._local_planner = PlannerClient()
            return self._local_planner
        return PlannerClient(self.planner_address, token=token, channel=self._planner)

    def watch_stub(self) -> Any:
        """The executor's stub on the asyncio channel (opened on first use, inside the server's event loop)."""
        if self._aio is None:
            self._aio = aio_channel_for(self.executor_address, self._connection)
        return executor_pb2_grpc.ExecutorServiceStub(self._aio)

    async def close(self) -> None:
        if self._aio is not None:
            await self._aio.close()
        self._executor.close()
        if self._planner is not None:
            self._planner.close()

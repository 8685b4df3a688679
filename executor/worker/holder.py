"""The worker's side of contract.holder: answers its run's "do I still hold the job?" on a Unix socket, by checking the
job's fencing token in Redis (fleet.leases.FenceGuard)."""

from __future__ import annotations

import contextlib
import socketserver
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import redis
import structlog

from contract.errors import LeaseLostError
from contract.holder import HELD, HOLDER_SOCKET_ENV, LOST, MAX_ANSWER_BYTES, UNKNOWN, answer
from fleet.leases import FenceGuard

log = structlog.get_logger("executor.worker.holder")
READ_TIMEOUT_S = 5.0  # a run that connects and sends nothing holds one handler thread this long at most


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    guard: FenceGuard


class _Handler(socketserver.StreamRequestHandler):
    timeout = READ_TIMEOUT_S
    server: _Server

    def handle(self) -> None:
        try:
            self.rfile.readline(MAX_ANSWER_BYTES)
        except OSError:
            return
        guard = self.server.guard
        try:
            guard.confirm()
            reply = answer(HELD, guard.fence)
        except LeaseLostError as e:
            reply = answer(LOST, str(e))
        except redis.RedisError as e:
            log.warning("holder.unconfirmed", error=str(e))
            reply = answer(UNKNOWN, f"Redis cannot say now ({e})")
        with contextlib.suppress(OSError):
            self.wfile.write(reply)


@contextlib.contextmanager
def serving(guard: FenceGuard) -> Iterator[dict[str, str]]:
    """Answer the run's questions while the block runs; yields the environment that tells the run where."""
    with tempfile.TemporaryDirectory(prefix="tunefleet-holder-") as directory:
        path = Path(directory) / "holder.sock"  # short: a Unix socket path is limited to 107 bytes
        server = _Server(str(path), _Handler)
        server.guard = guard
        thread = threading.Thread(target=server.serve_forever, name="holder", daemon=True)
        thread.start()
        try:
            yield {HOLDER_SOCKET_ENV: str(path)}
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=READ_TIMEOUT_S)

"""Issue 58 item 7, a slowloris against the dashboard: hundreds of half-sent requests neither stop /healthz from
answering nor stay open past the request-receipt deadline, and the log says so in a few lines, not one a
connection. A real dashboard process (uvicorn) in front of a real executor service."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from common.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
HALF_OPEN = 300
RECEIPT_S = 2.0


def _serving(log: Path, proc: subprocess.Popen[bytes]) -> int:
    def port() -> int | None:
        assert proc.poll() is None, log.read_text()
        found = re.search(r'"port": (\d+).*"event": "dashboard.serving"', log.read_text())
        return int(found.group(1)) if found else None
    return wait_until(port, 60)


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1024) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_half_sent_requests_are_cut_and_healthz_still_answers(executor_service, tmp_path):
    log = tmp_path / "dashboard.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dashboard", "--address", "127.0.0.1:0", "--executor",
                                 executor_service.address, "--request-receipt-s", str(RECEIPT_S)],
                                stdout=out, stderr=subprocess.STDOUT)
    half: list[socket.socket] = []
    try:
        port = _serving(log, proc)
        for _ in range(HALF_OPEN):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # never finished
            half.append(sock)
        started = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            assert answer.status == 200
        assert time.monotonic() - started < 2.0, "/healthz waited behind the half-sent requests"
        for sock in half:
            sock.settimeout(0.01)
        cut: set[int] = set()

        def all_cut() -> bool:
            cut.update(id(s) for s in half if id(s) not in cut and _closed_by_server(s))
            return len(cut) == len(half)
        wait_until(all_cut, RECEIPT_S + 30)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            assert answer.status == 200
    finally:
        for sock in half:
            sock.close()
        proc.terminate()
        proc.wait(timeout=30)
    lines = [line for line in log.read_text().splitlines() if "did not arrive within" in line]
    assert 1 <= len(lines) <= 5, f"{len(lines)} log lines for {HALF_OPEN} cut connections"


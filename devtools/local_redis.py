"""A redis-server of our own on a free port (loopback unless told), for the tests, `make run` and the benchmarks
(never a Redis someone else started)."""

from __future__ import annotations

import ipaddress
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

import redis

from common.net import free_port

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
_POLL_S = 0.05


class RedisServerError(RuntimeError):
    """redis-server is missing or did not start."""


def start_redis_server(directory: Path, appendonly: bool = False, log: IO[bytes] | int = subprocess.DEVNULL,
                       port: int = 0, host: str = "127.0.0.1",
                       extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen[bytes], str]:
    """Start redis-server with its data in `directory` (AOF on when asked, fsynced every second; no RDB
    snapshots; `extra`: more redis-server arguments) on host:port (port 0: a free one) and wait, bounded by
    START_TIMEOUT_S, until it answers; returns the process and its URL. Started again on the same directory and
    port, an AOF server has every write acknowledged before a clean stop (SIGTERM)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisServerError("redis-server is not installed: apt-get install redis-server (make redis does)")
    port = port or free_port(host)
    # Off loopback, redis-server's protected mode refuses clients that have no password: give it one.
    password = "" if ipaddress.ip_address(host).is_loopback else secrets.token_hex(16)
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", host, "--dir", str(directory),
                             "--appendonly", "yes" if appendonly else "no", "--save", "",
                             *(["--requirepass", password] if password else []), *extra],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"redis://{':' + password + '@' if password else ''}{host}:{port}/0"
    deadline = time.monotonic() + START_TIMEOUT_S
    with redis.Redis.from_url(url) as client:
        while True:
            try:
                client.ping()
                return proc, url
            except redis.ConnectionError:
                try:  # wait on the server process between pings
                    proc.wait(timeout=_POLL_S)
                except subprocess.TimeoutExpired:
                    if time.monotonic() < deadline:
                        continue
                stop_redis_server(proc)
                raise RedisServerError(f"redis-server on port {port} did not start within "
                                       f"{START_TIMEOUT_S:.0f} s") from None


def stop_redis_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()

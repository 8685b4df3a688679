"""`tunefleet health`, the probe of the containers and Kubernetes pods: a real planner server on loopback, in
plaintext and with TLS (a certificate made by openssl for the in-cluster name, as the prod overlay uses)."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common import exit_status
from common.rpc import ServerOptions, shutdown
from planner.server import create_server

SERVICE_NAME = "planner.tunefleet.svc"


def health(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launch", "health", *args], capture_output=True, text=True,
                          timeout=60, check=False)


def _certificate(directory: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl is missing (Debian package openssl)")
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "1", "-subj", f"/CN={SERVICE_NAME}", "-addext", f"subjectAltName=DNS:{SERVICE_NAME}",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    return cert, key


def test_health_says_serving_then_unreachable_once_the_server_stops() -> None:
    server, port, health_servicer = create_server("127.0.0.1:0")
    server.start()
    try:
        up = health(f"127.0.0.1:{port}")
        assert up.returncode == 0 and "SERVING" in up.stdout, up.stderr
        unknown = health(f"127.0.0.1:{port}", "--service", "no.such.Service")
        assert unknown.returncode == exit_status.NOT_FOUND and "NOT_FOUND" in unknown.stderr
    finally:
        shutdown(server, health_servicer, 0.5)
    down = health(f"127.0.0.1:{port}", "--timeout-s", "2")
    assert down.returncode == exit_status.UNAVAILABLE and "UNAVAILABLE" in down.stderr


def test_health_over_tls_checks_the_certificate_against_the_service_name(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path)
    server, port, health_servicer = create_server(
        "127.0.0.1:0", options=ServerOptions(tls_cert_chain=cert.read_bytes(), tls_private_key=key.read_bytes()))
    server.start()
    try:
        ok = health(f"127.0.0.1:{port}", "--tls-ca", str(cert), "--tls-server-name", SERVICE_NAME)
        assert ok.returncode == 0 and "SERVING" in ok.stdout, ok.stderr
        wrong_name = health(f"127.0.0.1:{port}", "--tls-ca", str(cert), "--timeout-s", "2")
        assert wrong_name.returncode == exit_status.UNAVAILABLE, "a certificate for another name must not pass"
        plaintext = health(f"127.0.0.1:{port}", "--timeout-s", "2")
        assert plaintext.returncode == exit_status.UNAVAILABLE
    finally:
        shutdown(server, health_servicer, 0.5)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launch", *args], capture_output=True, text=True, timeout=60,
                          check=False, env=env)


def test_cli_commands_reach_a_tls_server_with_its_token(tmp_path: Path) -> None:
    """Issue 9, item 7: the CLI had no TLS option, so it could only send its token in plaintext."""
    cert, key = _certificate(tmp_path)
    server, port, health_servicer = create_server("127.0.0.1:0", options=ServerOptions(
        token="s3cret", tls_cert_chain=cert.read_bytes(), tls_private_key=key.read_bytes()))
    server.start()
    address = f"127.0.0.1:{port}"
    try:
        ok = cli("models", "--address", address, "--token", "s3cret", "--tls-ca", str(cert),
                 "--tls-server-name", SERVICE_NAME)
        assert ok.returncode == 0 and "Llama-3.1-8B" in ok.stdout, ok.stderr
        env = {**os.environ, "TUNEFLEET_TLS_CA": str(cert), "TUNEFLEET_TLS_SERVER_NAME": SERVICE_NAME,
               "TUNEFLEET_TOKEN": "s3cret"}
        assert cli("hardware", "--address", address, env=env).returncode == 0
        plaintext = cli("models", "--address", address, "--token", "s3cret")
        assert plaintext.returncode != 0 and "Traceback" not in plaintext.stderr
        missing_ca = cli("models", "--address", address, "--tls-ca", str(tmp_path / "none.pem"))
        assert missing_ca.returncode != 0 and "--tls-ca" in missing_ca.stderr and "Traceback" not in missing_ca.stderr
    finally:
        shutdown(server, health_servicer, 0.5)


def test_a_token_bound_for_another_machine_in_plaintext_is_warned_about() -> None:
    import argparse

    from clients import connection

    args = argparse.Namespace(token="t", tls_ca=None, tls_server_name="")
    assert connection.is_loopback("127.0.0.1:50051") and connection.is_loopback("[::1]:1")
    assert connection.is_loopback("localhost:50051") and not connection.is_loopback("planner.tunefleet.svc:50051")
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        connection.from_arguments(args, "127.0.0.1:50051")
        assert stderr.getvalue() == ""
        connection.from_arguments(args, "10.0.0.7:50051")
    assert "in plaintext" in stderr.getvalue() and "--tls-ca" in stderr.getvalue()

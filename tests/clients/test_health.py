"""`tunefleet health`, the probe of the containers and Kubernetes pods: a real planner server on loopback, in
plaintext and with TLS (a certificate made by openssl for the in-cluster name, as the prod overlay uses)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common.rpc import ServerOptions, shutdown
from planner.server import create_server

SERVICE_NAME = "planner.tunefleet.svc"


def health(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clients.cli", "health", *args], capture_output=True, text=True,
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
        assert unknown.returncode == 3 and "NOT_FOUND" in unknown.stderr
    finally:
        shutdown(server, health_servicer, 0.5)
    down = health(f"127.0.0.1:{port}", "--timeout-s", "2")
    assert down.returncode == 3 and "UNAVAILABLE" in down.stderr


def test_health_over_tls_checks_the_certificate_against_the_service_name(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path)
    server, port, health_servicer = create_server(
        "127.0.0.1:0", options=ServerOptions(tls_cert_chain=cert.read_bytes(), tls_private_key=key.read_bytes()))
    server.start()
    try:
        ok = health(f"127.0.0.1:{port}", "--tls-ca", str(cert), "--tls-server-name", SERVICE_NAME)
        assert ok.returncode == 0 and "SERVING" in ok.stdout, ok.stderr
        wrong_name = health(f"127.0.0.1:{port}", "--tls-ca", str(cert), "--timeout-s", "2")
        assert wrong_name.returncode == 3, "a certificate for another name must not pass"
        plaintext = health(f"127.0.0.1:{port}", "--timeout-s", "2")
        assert plaintext.returncode == 3
    finally:
        shutdown(server, health_servicer, 0.5)

"""How a command reaches a tunefleet server: its bearer token, TLS (CA bundle and the name on the server's
certificate), and a warning before a token would cross the network in plaintext."""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc

TOKEN_ENV = "TUNEFLEET_TOKEN"
TLS_CA_ENV = "TUNEFLEET_TLS_CA"
TLS_SERVER_NAME_ENV = "TUNEFLEET_TLS_SERVER_NAME"


@dataclass(frozen=True)
class Connection:
    token: str = ""
    tls_ca: bytes | None = None  # None: plaintext; b"": TLS with the system's CA bundle
    tls_server_name: str = ""


def add_arguments(group: argparse._ArgumentGroup | argparse.ArgumentParser, token: bool = True) -> None:
    if token:
        group.add_argument("--token", default=os.environ.get(TOKEN_ENV, ""),
                           help=f"bearer token (env {TOKEN_ENV}); sent in plaintext unless --tls-ca is given")
    group.add_argument("--tls-ca", type=Path, default=os.environ.get(TLS_CA_ENV) or None,
                       help=f"PEM CA bundle: connect with TLS (the server runs with --tls-cert; env {TLS_CA_ENV})")
    group.add_argument("--tls-server-name", default=os.environ.get(TLS_SERVER_NAME_ENV, ""),
                       help="the name on the server's certificate, when it differs from the address's host "
                            f"(env {TLS_SERVER_NAME_ENV})")


def is_loopback(address: str) -> bool:
    """True when host:port (or [v6]:port, or a unix: socket) never leaves this machine."""
    if address.startswith("unix:"):
        return True
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def from_arguments(args: argparse.Namespace, address: str, program: str = "tunefleet") -> Connection:
    """The connection the flags describe; exits 2 when the CA file cannot be read, and warns on stderr when a
    token would go to another machine without TLS."""
    ca = None
    if args.tls_ca:
        try:
            ca = Path(args.tls_ca).read_bytes()
        except OSError as e:
            raise SystemExit(f"{program}: --tls-ca {args.tls_ca}: {e.strerror}") from e
    token = getattr(args, "token", "")
    if token and ca is None and address and not is_loopback(address):
        print(f"{program}: warning: sending the bearer token to {address} in plaintext; pass --tls-ca (or set "
              f"{TLS_CA_ENV}) to use TLS", file=sys.stderr)
    return Connection(token, ca, args.tls_server_name)


# gRPC's own retries (before any response arrived): a server shedding load (RESOURCE_EXHAUSTED, "retry with
# backoff") or restarting (UNAVAILABLE) is tried again with jittered exponential backoff. Every tunefleet call is
# safe to repeat: reads, Submit (keyed by plan id) and Cancel are idempotent.
RETRY_SERVICE_CONFIG = json.dumps({"methodConfig": [{
    "name": [{"service": "tunefleet.v1.PlannerService"}, {"service": "tunefleet.v1.ExecutorService"}],
    "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "2s", "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]})


def _channel_options(connection: Connection) -> list[tuple[str, object]]:
    options: list[tuple[str, object]] = [("grpc.enable_retries", 1), ("grpc.service_config", RETRY_SERVICE_CONFIG)]
    if connection.tls_ca is not None and connection.tls_server_name:
        options.append(("grpc.ssl_target_name_override", connection.tls_server_name))
    return options


def channel_for(address: str, connection: Connection = Connection()) -> grpc.Channel:
    options = _channel_options(connection)
    if connection.tls_ca is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=connection.tls_ca or None),
                               options=options)


def aio_channel_for(address: str, connection: Connection = Connection()) -> grpc.aio.Channel:
    """channel_for on asyncio (created inside the event loop that uses it): for a server streaming to many callers
    without a thread each."""
    options = _channel_options(connection)
    if connection.tls_ca is None:
        return grpc.aio.insecure_channel(address, options=options)
    return grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=connection.tls_ca or None),
                                   options=options)


def metadata(connection: Connection) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {connection.token}"),) if connection.token else ()

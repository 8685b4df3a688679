"""Network helpers for local stacks, tests, benchmarks and the fleet's rendezvous."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing listens on right now."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def route_address(host: str, port: int) -> str:
    """This machine's address on the route to host:port (the one peers that reach the same service reach us
    on). A UDP connect sends nothing; it only asks the kernel which source address it would use."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((host, port))
        return str(s.getsockname()[0])

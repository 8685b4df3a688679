"""Network helpers for local stacks, tests, benchmarks and the fleet's rendezvous."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Linux's default ephemeral range (net.ipv4.ip_local_port_range), used where /proc does not say.
DEFAULT_EPHEMERAL_PORTS = (32768, 60999)
# Ports below the ephemeral range that a listener may be given: the 10,000 just under it (above the
# registered-services crowd of the low thousands).
LISTEN_PORTS_BELOW_EPHEMERAL = 10_000
_PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing listens on right now."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def ephemeral_ports() -> tuple[int, int]:
    """The kernel's ephemeral port range (first, last): where bind(port 0) and outgoing connections get ports."""
    try:
        first, last = (int(v) for v in _PORT_RANGE_FILE.read_text().split())
        return first, last
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_PORTS


def listen_port(host: str, attempts: int = 64) -> int:
    """A port on `host` that nothing listens on now and that the kernel will not hand out meanwhile.

    For a port chosen now and bound later by another process (torchrun's c10d store on a gang's node 0, bound
    only after every member joined): a port from free_port() lies in the ephemeral range, so any outgoing
    connection on the host may take it in between (EADDRINUSE when the store binds). One below that range is
    only ever taken by a process that binds it by number.
    """
    first, _ = ephemeral_ports()
    low = max(1024, first - LISTEN_PORTS_BELOW_EPHEMERAL)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for port in random.sample(range(low, first), min(attempts, first - low)):
        with socket.socket(family) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in {low}..{first - 1} on {host} after {attempts} tries")


def route_address(host: str, port: int) -> str:
    """This machine's address on the route to host:port (the one peers that reach the same service reach us
    on). A UDP connect sends nothing; it only asks the kernel which source address it would use."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((host, port))
        return str(s.getsockname()[0])

"""Ports for listeners chosen by one process and bound later by another (a gang's rendezvous)."""

from __future__ import annotations

import socket

import pytest

from common import net


def test_a_listen_port_lies_below_the_ephemeral_range_and_is_free():
    first, _ = net.ephemeral_ports()
    ports = {net.listen_port("127.0.0.1") for _ in range(20)}
    assert all(first - net.LISTEN_PORTS_BELOW_EPHEMERAL <= p < first for p in ports)
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # nothing listens there


def test_a_port_taken_by_a_listener_is_never_chosen(monkeypatch):
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    taken = held.getsockname()[1]
    # a range of two ports, one of them taken: every choice is the other
    monkeypatch.setattr(net, "ephemeral_ports", lambda: (taken + 1, 60999))
    monkeypatch.setattr(net, "LISTEN_PORTS_BELOW_EPHEMERAL", 2)
    try:
        chosen = {net.listen_port("127.0.0.1") for _ in range(10)}
        assert taken not in chosen and chosen <= {taken - 1}
    finally:
        held.close()


def test_no_free_port_is_an_error_that_names_the_range(monkeypatch):
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    taken = held.getsockname()[1]
    monkeypatch.setattr(net, "ephemeral_ports", lambda: (taken + 1, 60999))
    monkeypatch.setattr(net, "LISTEN_PORTS_BELOW_EPHEMERAL", 1)
    try:
        with pytest.raises(OSError, match=f"{taken}..{taken}"):
            net.listen_port("127.0.0.1")
    finally:
        held.close()

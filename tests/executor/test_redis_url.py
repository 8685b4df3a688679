"""The fleet's Redis URL (fleet.redis_url): plain and Sentinel-managed, and a malformed one refused naming its part."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fleet.redis_url import MAX_WAIT_TIMEOUT_MS, SENTINEL_PORT, WAIT_TIMEOUT_MS, RedisUrlError, parse_redis_url


def test_a_plain_url_is_unchanged_and_waits_for_no_replica() -> None:
    address = parse_redis_url("redis://:secret@10.0.0.5:6380/2")
    assert address.url == "redis://:secret@10.0.0.5:6380/2" and not address.managed
    assert address.wait_replicas == 0
    assert address.redacted() == "redis://10.0.0.5:6380/2"


def test_a_plain_url_may_ask_for_a_replica_and_keeps_redis_py_options() -> None:
    address = parse_redis_url("redis://10.0.0.5:6379/0?wait_replicas=1&wait_timeout_ms=500&socket_keepalive=true")
    assert (address.wait_replicas, address.wait_timeout_ms) == (1, 500)
    assert address.url == "redis://10.0.0.5:6379/0?socket_keepalive=true"


def test_a_sentinel_url_names_its_sentinels_service_and_db() -> None:
    address = parse_redis_url("redis+sentinel://:pw@s1:26380,s2,[::1]:26381/prod-fleet/3?sentinel_password=sp")
    assert address.managed
    assert address.sentinels == (("s1", 26380), ("s2", SENTINEL_PORT), ("::1", 26381))
    assert (address.service, address.db, address.password, address.sentinel_password) == ("prod-fleet", 3, "pw", "sp")
    assert (address.wait_replicas, address.wait_timeout_ms) == (1, WAIT_TIMEOUT_MS), "behind Sentinel: one replica"
    assert "pw" not in address.redacted() and "sp" not in address.redacted()


def test_a_sentinel_url_without_a_db_uses_db_0_and_may_turn_waiting_off() -> None:
    address = parse_redis_url("redis+sentinel://s1:26379/mymaster?wait_replicas=0")
    assert (address.db, address.wait_replicas) == (0, 0)


@pytest.mark.parametrize(("url", "part"), [
    ("http://s1:26379/m", "scheme"),
    ("s1:26379", "scheme"),
    ("redis+sentinel://s1:26379", "service"),
    ("redis+sentinel://s1:26379/m/zero", "db"),
    ("redis+sentinel://s1:26379/m/0/extra", "path"),
    ("redis+sentinel://s1:26379,,s2:26379/m", "sentinels"),
    ("redis+sentinel://s1:notaport/m", "sentinels"),
    ("redis+sentinel://s1:70000/m", "sentinels"),
    ("redis+sentinel://:26379/m", "sentinels"),
    ("redis+sentinel://s1/m?wait_replicas=two", "wait_replicas"),
    ("redis+sentinel://s1/m?wait_timeout_ms=0", "wait_timeout_ms"),
    (f"redis+sentinel://s1/m?wait_timeout_ms={MAX_WAIT_TIMEOUT_MS + 1}", "wait_timeout_ms"),
    ("redis+sentinel://s1/m?socket_timeout=3", "socket_timeout"),
    ("redis://h:6379/0?sentinel_password=x", "sentinel_password"),
])
def test_a_malformed_url_is_refused_naming_the_part(url: str, part: str) -> None:
    with pytest.raises(RedisUrlError) as refused:
        parse_redis_url(url)
    assert refused.value.part == part
    assert str(refused.value).startswith(f"Redis URL: {part} ")


@pytest.mark.parametrize("command", [["worker"], ["serve", "executor"]])
def test_the_worker_and_the_service_refuse_a_malformed_url_before_connecting(command: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "launch", *command, "--redis", "redis+sentinel://s1:26379"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "argument --redis: Redis URL: service is missing" in done.stderr

"""A Sentinel-managed Redis of our own on loopback, for the failover tests and `make bench-failover`: a primary, its
replicas and three redis-sentinel processes, each on a free port (never a Redis someone else started)."""

from __future__ import annotations

import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import redis

from common.net import free_port
from common.wait import wait_until
from devtools.local_redis import RedisServerError, start_redis_server, stop_redis_server

SERVICE = "tunefleet"  # the name the sentinels monitor the primary under
QUORUM = 2  # sentinels that must agree the primary is down (of three)
# Test defaults; Sentinel's own default is 30 s, the bench (and deploy/) use 5 s.
DOWN_AFTER_MS = 1_500
FAILOVER_TIMEOUT_MS = 10_000
_POLL_S = 0.05


@dataclass
class RedisNode:
    """One redis-server of the set, restartable on its port and data directory."""

    port: int
    data_dir: Path
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    def client(self, timeout_s: float = 1.0) -> redis.Redis:
        return redis.Redis("127.0.0.1", self.port, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)

    def role(self) -> str:
        """'master' or 'slave' as the server says now ('' when it does not answer)."""
        try:
            with self.client() as c:
                role = c.role()[0]
        except redis.RedisError:
            return ""
        return role.decode() if isinstance(role, bytes) else str(role)

    def restart(self) -> None:
        """Start it again on its port and data (its append-only file): it comes back believing what it held."""
        self.proc = _start_server(self.data_dir, self.port, self.log, None)


@dataclass
class SentinelSet:
    """The servers (nodes[0] the first primary) and the sentinels that watch them; `url` is the fleet's URL."""

    nodes: list[RedisNode]
    sentinels: list[subprocess.Popen[bytes]]
    sentinel_ports: list[int]
    directory: Path
    down_after_ms: int
    paused: set[int] = field(default_factory=set)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def primary_address(self) -> tuple[str, int] | None:
        """Where the sentinels (the first that answers) say the primary is now."""
        for port in self.sentinel_ports:
            try:
                with redis.Redis("127.0.0.1", port, socket_timeout=1.0) as s:
                    host, primary_port = s.sentinel_get_master_addr_by_name(SERVICE)
                    return str(host), int(primary_port)
            except (redis.RedisError, TypeError):
                continue
        return None

    def primary(self) -> RedisNode:
        address = self.primary_address()
        return next(n for n in self.nodes if address and n.port == address[1])

    def wait_for_promotion(self, old: RedisNode, timeout_s: float) -> RedisNode:
        """The replica the sentinels promoted in place of `old`, once it answers as the primary."""
        def promoted() -> RedisNode | None:
            address = self.primary_address()
            new = next((n for n in self.nodes if address and n.port == address[1] != old.port), None)
            return new if new is not None and new.role() == "master" else None
        return cast(RedisNode, wait_until(promoted, timeout_s, _POLL_S))  # truthy: a node

    def wait_until_replica(self, node: RedisNode, of: RedisNode, timeout_s: float) -> None:
        """`node` follows `of` with its link up (the sentinels reconfigured it)."""
        def following() -> bool:
            try:
                with node.client() as c:
                    info = c.info("replication")
            except redis.RedisError:
                return False
            return bool(info.get("role") == "slave" and int(info.get("master_port", 0)) == of.port and
                        info.get("master_link_status") == "up")
        wait_until(following, timeout_s, _POLL_S)

    def kill(self, node: RedisNode) -> None:
        node.proc.kill()
        node.proc.wait()

    def pause(self, node: RedisNode) -> None:
        node.proc.send_signal(signal.SIGSTOP)
        self.paused.add(node.port)

    def resume(self, node: RedisNode) -> None:
        node.proc.send_signal(signal.SIGCONT)
        self.paused.discard(node.port)

    def stop(self) -> None:
        for node in self.nodes:
            if node.port in self.paused:
                self.resume(node)
            stop_redis_server(node.proc)
        for proc in self.sentinels:
            stop_redis_server(proc)


def _start_server(data_dir: Path, port: int, log: Path, replica_of: tuple[str, int] | None) -> subprocess.Popen[bytes]:
    """A redis-server with its append-only file on (as a deployment keeps one), a replica of `replica_of` if given."""
    with log.open("ab") as out:
        proc, _ = start_redis_server(data_dir, appendonly=True, port=port, log=out,
                                     extra=("--replicaof", replica_of[0], str(replica_of[1])) if replica_of else ())
    return proc


def start_sentinel_set(directory: Path, replicas: int = 1, down_after_ms: int = DOWN_AFTER_MS,
                       failover_timeout_ms: int = FAILOVER_TIMEOUT_MS, sentinels: int = 3) -> SentinelSet:
    """A primary with `replicas` replicas and `sentinels` sentinels on loopback, each process logging into
    `directory`; returns once every replica is in sync and every sentinel has found the others and the replicas."""
    binary = shutil.which("redis-sentinel")
    if binary is None:
        raise RedisServerError("redis-sentinel is not installed: apt-get install redis-sentinel (make redis does)")
    nodes: list[RedisNode] = []
    started = SentinelSet(nodes, [], [], directory, down_after_ms)
    try:
        for i in range(replicas + 1):
            data, log, port = directory / f"redis-{i}", directory / f"redis-{i}.log", free_port("127.0.0.1")
            data.mkdir(parents=True)
            nodes.append(RedisNode(port, data, _start_server(data, port, log, nodes[0].address if nodes else None),
                                   log))
        for replica in nodes[1:]:
            started.wait_until_replica(replica, nodes[0], 20.0)
        for i in range(sentinels):
            port = free_port("127.0.0.1")
            config = directory / f"sentinel-{i}.conf"  # a sentinel rewrites its own config file: one each
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {directory}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {nodes[0].port} {QUORUM}\n"
                f"sentinel down-after-milliseconds {SERVICE} {down_after_ms}\n"
                f"sentinel failover-timeout {SERVICE} {failover_timeout_ms}\n"
                f"sentinel parallel-syncs {SERVICE} 1\n")
            with (directory / f"sentinel-{i}.log").open("ab") as out:
                started.sentinels.append(subprocess.Popen([binary, str(config)], stdout=out,
                                                          stderr=subprocess.STDOUT, start_new_session=True))
            started.sentinel_ports.append(port)
        _wait_for_sentinels(started, replicas, sentinels)
    except BaseException:
        started.stop()
        raise
    return started


def _wait_for_sentinels(started: SentinelSet, replicas: int, sentinels: int, timeout_s: float = 30.0) -> None:
    """Every sentinel sees the primary, its replicas and the other sentinels (else a failover could not be agreed)."""
    def sees_all(port: int) -> bool:
        try:
            with redis.Redis("127.0.0.1", port, socket_timeout=1.0) as s:
                state = s.sentinel_master(SERVICE)
        except (redis.RedisError, KeyError):
            return False
        return int(state["num-slaves"]) >= replicas and int(state["num-other-sentinels"]) >= sentinels - 1
    try:
        wait_until(lambda: all(sees_all(p) for p in started.sentinel_ports), timeout_s, _POLL_S)
    except TimeoutError:
        raise RedisServerError(f"the sentinels did not all see {replicas} replica(s) and {sentinels - 1} other "
                               f"sentinel(s) within {timeout_s:.0f} s") from None

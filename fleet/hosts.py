"""Worker hosts: the host registry in Redis (a hash per host that expires unless its worker heartbeats). What GPUs a
host has is its worker's to find (executor.worker.gpus), and which catalog class they are the planner's
(planner.classify)."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from google.protobuf import timestamp_pb2
from tunefleet.v1 import executor_pb2

from fleet.errors import HostNotQuarantinedError
from fleet.keys import HOSTS_INDEX, host_key, quarantine_key

# A worker refreshes its record every HEARTBEAT_INTERVAL_S; the record expires HOST_TTL_S after the last
# refresh, so a host that died silently drops out of Fleet within HOST_TTL_S.
HEARTBEAT_INTERVAL_S = 5.0
HOST_TTL_S = 30
# A quarantine outlives its host's record (a sick host's worker may restart, or stop for good): an admin clears it,
# or it lapses after this long, so that a host that never returns leaves nothing behind.
QUARANTINE_TTL_S = 30 * 24 * 3600


@dataclass(frozen=True)
class HostGpus:
    gpu_class: str
    gpu_count: int
    gpu_memory_bytes: int
    device_name: str = ""


def default_host_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class HostRegistry:
    """Registered hosts of a fleet; a record lives HOST_TTL_S past its last heartbeat."""

    def __init__(self, connection: redis.Redis, ttl_s: int = HOST_TTL_S) -> None:
        self.redis: Any = connection  # redis-py's stubs type replies as unions of every RESP type
        self.ttl_s = ttl_s

    def heartbeat(self, host_id: str, gpus: HostGpus, running_job_id: str, queues: list[str], work_dir: Path,
                  work_dir_shared: bool, checkpoint_store: str = "") -> None:
        now = time.time()
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(host_key(host_id), mapping={"gpu_class": gpus.gpu_class, "gpu_count": gpus.gpu_count,
                                              "gpu_memory_bytes": gpus.gpu_memory_bytes,
                                              "device_name": gpus.device_name, "running_job_id": running_job_id,
                                              "queues": ",".join(queues), "last_heartbeat_s": now,
                                              "work_dir": str(work_dir), "work_dir_shared": int(work_dir_shared),
                                              "checkpoint_store": checkpoint_store})
        pipe.expire(host_key(host_id), self.ttl_s)
        pipe.zadd(HOSTS_INDEX, {host_id: now})
        pipe.execute()

    def quarantine(self, host_id: str, reason: str) -> str:
        """Take the host out of service for `reason`; a host already quarantined keeps its first reason (the one
        that took it out). The reason in force."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hsetnx(quarantine_key(host_id), "reason", reason)
        pipe.hsetnx(quarantine_key(host_id), "since_s", time.time())
        pipe.expire(quarantine_key(host_id), QUARANTINE_TTL_S)
        pipe.hget(quarantine_key(host_id), "reason")
        return str(pipe.execute()[-1].decode())

    def quarantine_reason(self, host_id: str) -> str | None:
        reason = self.redis.hget(quarantine_key(host_id), "reason")
        return None if reason is None else str(reason.decode())

    def clear(self, host_id: str) -> str:
        """Put a quarantined host back in service: the reason it was out; HostNotQuarantinedError when it was not."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hget(quarantine_key(host_id), "reason")
        pipe.delete(quarantine_key(host_id))
        reason, _ = pipe.execute()
        if reason is None:
            raise HostNotQuarantinedError("host_id", f"host {host_id!r} is not quarantined ('tunefleet fleet' lists "
                                                     "the hosts and their health)")
        return str(reason.decode())

    def remove(self, host_id: str) -> None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(host_key(host_id))
        pipe.zrem(HOSTS_INDEX, host_id)
        pipe.execute()

    def hosts(self, gpu_class: str = "") -> list[executor_pb2.Host]:
        """Live hosts (expired ones are dropped from the index as they are found)."""
        ids = [m.decode() for m in self.redis.zrange(HOSTS_INDEX, 0, -1)]
        pipe = self.redis.pipeline(transaction=False)
        for host_id in ids:
            pipe.hgetall(host_key(host_id))
            pipe.hgetall(quarantine_key(host_id))
        replies = pipe.execute()
        hosts, gone = [], []
        for host_id, record, quarantine in zip(ids, replies[::2], replies[1::2], strict=True):
            if not record:
                gone.append(host_id)
                continue
            if gpu_class and record[b"gpu_class"].decode() != gpu_class:
                continue
            beat = timestamp_pb2.Timestamp()
            beat.FromNanoseconds(int(float(record[b"last_heartbeat_s"]) * 1e9))
            hosts.append(executor_pb2.Host(host_id=host_id, gpu_class=record[b"gpu_class"].decode(),
                                           gpu_count=int(record[b"gpu_count"]),
                                           gpu_memory_bytes=int(record[b"gpu_memory_bytes"]),
                                           running_job_id=record[b"running_job_id"].decode(), last_heartbeat=beat,
                                           work_dir=record.get(b"work_dir", b"").decode(),
                                           work_dir_shared=record.get(b"work_dir_shared") == b"1",
                                           checkpoint_store=record.get(b"checkpoint_store", b"").decode(),
                                           quarantine_reason=quarantine.get(b"reason", b"").decode()))
            if quarantine:
                hosts[-1].quarantined_at.FromNanoseconds(int(float(quarantine[b"since_s"]) * 1e9))
        if gone:
            self.redis.zrem(HOSTS_INDEX, *gone)
        return hosts

"""The ranks of a one-node run, started by the launcher itself instead of under torchrun's agent.

For one node, torchrun's standalone mode does three things: it gives each rank its environment (RANK, LOCAL_RANK,
WORLD_SIZE, the address of rank 0's store, one OpenMP thread a rank when a node runs several), it starts them, and it
stops the others when one fails. Its agent is one more Python process at every run's start: 2.6 s of CPU to import
on the 2-core test machine (`python -c "import torch.distributed.run"`, 2026-11-29), of a tiny run's 18.6 s, and a
monitoring loop beside the ranks after. A run of several nodes still meets under torchrun (contract.rendezvous).

What differs from torchrun, on purpose: the launcher sees each rank's own exit status (a rank that refused the plan
exits RANK_EXIT_REFUSED, and a rank a signal killed is named by its signal, not read back from torchrun's summary).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping
from typing import IO

from common.net import listen_port

# How long the other ranks get to stop on SIGTERM after one failed, before SIGKILL (torchrun's agent waits 30 s;
# a rank's SIGTERM handler only stops the step loop, it writes nothing).
STOP_GRACE_S = 10.0
# torchrun's default when a node runs several ranks and OMP_NUM_THREADS is unset: a thread a rank, not a thread per
# core in every rank, which oversubscribes the cores (torch.distributed.run, "Setting OMP_NUM_THREADS").
THREADS_PER_RANK_WHEN_SEVERAL = "1"
LOOPBACK = "127.0.0.1"


def rank_environment(base: Mapping[str, str], rank: int, ranks: int, port: int, run_id: str) -> dict[str, str]:
    """What torchrun's agent gives rank `rank` of `ranks` on one node (torch.distributed.elastic's worker env)."""
    env = dict(base)
    for name, value in (("RANK", rank), ("LOCAL_RANK", rank), ("GROUP_RANK", 0), ("ROLE_RANK", rank),
                        ("WORLD_SIZE", ranks), ("LOCAL_WORLD_SIZE", ranks), ("GROUP_WORLD_SIZE", 1),
                        ("ROLE_WORLD_SIZE", ranks), ("ROLE_NAME", "default"), ("MASTER_ADDR", LOOPBACK),
                        ("MASTER_PORT", port), ("TORCHELASTIC_RUN_ID", run_id), ("TORCHELASTIC_RESTART_COUNT", 0),
                        ("TORCHELASTIC_MAX_RESTARTS", 0)):
        env[name] = str(value)
    if ranks > 1:
        env.setdefault("OMP_NUM_THREADS", THREADS_PER_RANK_WHEN_SEVERAL)
    return env


class LocalRanks:
    """`ranks` processes running `command` (one node's ranks), waited on and signalled as one process, as the
    launcher saw torchrun's agent."""

    def __init__(self, command: list[str], ranks: int, env: Mapping[str, str], log: IO[str]) -> None:
        port, run_id = listen_port(LOOPBACK), uuid.uuid4().hex
        # Each rank in a session of its own, as torchrun starts them: a signal to the launcher's group does not reach
        # them, and the kernel kills each when the launcher dies (common.lifetime.die_with_parent in the rank).
        self.processes = [subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                           env=rank_environment(env, rank, ranks, port, run_id))
                          for rank in range(ranks)]
        self.failed: int | None = None  # the first nonzero exit status, once a rank ended with one

    def poll(self) -> int | None:
        """None while a rank runs and none failed; else the run's exit status (the first failure's, or 0)."""
        for p in self.processes:
            code = p.poll()
            if code and self.failed is None:
                self.failed = code
                self._stop_others()
        return (self.failed or 0) if all(p.poll() is not None for p in self.processes) else None

    def wait(self, timeout: float) -> int:
        """The run's exit status once every rank ended; subprocess.TimeoutExpired after `timeout` s otherwise."""
        deadline = time.monotonic() + timeout
        for p in self.processes:
            remaining = deadline - time.monotonic()
            if p.poll() is None and remaining > 0:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(remaining)
            if p.returncode:
                break  # a failure: poll stops the others
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(self.processes[0].args, timeout)
        return code

    def send_signal(self, signum: int) -> None:
        for p in self.processes:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signum)

    def _stop_others(self) -> None:
        """One rank failed: the others would wait in a collective for it (torchrun's agent stops them too)."""
        self.send_signal(signal.SIGTERM)
        for p in self.processes:
            try:
                p.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
                p.wait()

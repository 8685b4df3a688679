"""The hang watch: a run that stops completing steps (outside loading and checkpointing) for longer than
max(factor × its step time, a floor) is declared hung. Every rank is asked for its stacks, the ranks that cannot
answer are named (stopped, or gone), the stacks are saved with the job's logs, and the worker stops the tree and
gives the job back to resume from its last checkpoint, counted as an infrastructure failure."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from common.wait import wait_until
from contract import liveness
from executor.worker.supervision import RetryLater

# A run is hung after max(DEFAULT_HANG_FACTOR × its step time, DEFAULT_HANG_FLOOR_S) without a step: long enough
# for a slow step's variance and a collective's own timeouts to show first, short against hours lost.
DEFAULT_HANG_FACTOR = 10.0
DEFAULT_HANG_FLOOR_S = 300.0
# How long the ranks get to write their stacks once asked.
DUMP_WAIT_S = 5.0
DUMP_SETTLE_S = 0.3  # a dump is whole once its file stops growing for this long


@dataclass(frozen=True)
class HangPolicy:
    factor: float = DEFAULT_HANG_FACTOR
    floor_s: float = DEFAULT_HANG_FLOOR_S  # 0: the watch is off

    def stalled_s(self, out: Path) -> float | None:
        """How long the run in `out` has made no progress, once that counts as hung; None otherwise."""
        if not self.floor_s:
            return None
        return liveness.stalled_s(liveness.read_heartbeat(liveness.heartbeat_path(out)), time.time(), self.factor,
                                  self.floor_s)


@dataclass(frozen=True)
class _Rank:
    rank: int
    process: psutil.Process
    stopped: bool


def _ranks(launcher_pid: int) -> list[_Rank]:
    """The training ranks under a launcher, by global rank."""
    found = []
    try:
        children = psutil.Process(launcher_pid).children(recursive=True)
    except psutil.Error:
        return []
    for p in children:
        try:
            # torchrun's agent (one node of a gang) names the module too, but only ranks carry a RANK
            rank = p.environ().get("RANK") if liveness.RANK_MODULE in p.cmdline() else None
            if rank is not None:
                found.append(_Rank(int(rank), p, p.status() == psutil.STATUS_STOPPED))
        except (psutil.Error, ValueError):
            continue
    return sorted(found, key=lambda r: r.rank)


def ask_for_stacks(launcher_pid: int) -> list[_Rank]:
    """Signal every rank of this node that can answer to dump its stacks; this node's ranks."""
    ranks = _ranks(launcher_pid)
    for r in ranks:
        if not r.stopped:
            with contextlib.suppress(psutil.Error):
                r.process.send_signal(liveness.DUMP_SIGNAL)
    return ranks


def diagnose(launcher_pid: int, out: Path, stalled: float, nodes: int = 1) -> str:
    """Ask this node's ranks for their stacks (the other nodes of a gang ask theirs: the files are on the shared
    output), wait for them, save them in logs/hang-step-N.txt, and say what was stuck where: the message of the
    job's event."""
    beat = liveness.read_heartbeat(liveness.heartbeat_path(out))
    local = {r.rank: r for r in ask_for_stacks(launcher_pid)}
    world = len(local) * nodes  # every node runs as many ranks
    asked = {rank: liveness.stacks_path(out, rank) for rank in range(world)
             if rank not in local or not local[rank].stopped}
    last: dict[int, int] = {}

    def written() -> bool:
        """Every asked rank wrote, and no file grew since the last look: the dumps are whole."""
        sizes = {rank: _size(path) for rank, path in asked.items()}
        done = all(sizes.values()) and sizes == last
        last.update(sizes)
        return done
    with contextlib.suppress(TimeoutError):  # a rank that writes nothing in time is reported as such
        wait_until(written, DUMP_WAIT_S, DUMP_SETTLE_S)
    where = []
    saved = [f"no step completed for {stalled:.0f} s"]
    for rank in range(world):
        r = local.get(rank)
        who = f"rank {rank} (pid {r.process.pid})" if r else f"rank {rank} (another node)"
        if r is not None and r.stopped:
            where.append(f"{who} is stopped (SIGSTOP or a debugger) and cannot answer")
            continue
        dump = _read(asked[rank])
        saved.append(f"--- {who} ---\n{dump or '(no stacks written)'}")
        frame = liveness.stuck_frame(dump)
        where.append(f"rank {rank} waits in {frame}" if frame else
                     f"{who} wrote no stacks (stopped, or stuck outside Python)")
    step = beat.step if beat else 0
    report = out / "logs" / f"hang-step-{step}.txt"
    report.write_text("\n".join(saved) + "\n")
    after = f" after step {step} (a step takes {beat.step_s:.2f} s)" if beat else ""
    return (f"hung: no step completed for {stalled:.0f} s{after}; {'; '.join(where) or 'no rank found'}; stacks "
            f"in {report}; requeued to resume from its last checkpoint")


def hung(launcher_pid: int, out: Path, stalled: float, nodes: int = 1) -> RetryLater:
    """The outcome of a hung run (after `diagnose`): back to its queue to resume from its last checkpoint, an
    infrastructure failure (counted against the fleet's retry limit)."""
    return RetryLater(diagnose(launcher_pid, out, stalled, nodes), infra_failure=True)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""

"""A member of a multi-node job's gang (node k >= 1, fleet.gangs): check that this host can be one, wait for
the leader's start, run this node's ranks, and stop them when the leader stops the run, the gang ends, or this
member's key is lost."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from common import exit_status
from contract.errors import PlanError
from contract.ownership import check_output
from contract.paths import Roots
from contract.rendezvous import Rendezvous
from executor.worker.supervision import STOP_GRACE_S, SUPERVISE_POLL_S, kill_group, while_running
from executor.worker.watchdog import ask_for_stacks
from fleet.gangs import DUMPING, GANG_MARKER, MEMBER_RENEW_INTERVAL_S, RUNNING, STOPPING, Gang, GangView

log = structlog.get_logger("executor.worker.gang_member")
StartNode = Callable[[Path, Path, Rendezvous], "subprocess.Popen[bytes]"]  # plan, output, rendezvous


@dataclass
class Member:
    gang: Gang
    node_rank: int
    host_id: str
    address: str  # where the other nodes reach this host
    roots: Roots
    stopping: threading.Event  # this worker is shutting down
    launch: StartNode  # the worker's start of a run (WorkerRuntime._launch)

    def run(self, out: Path) -> int | None:
        """This node's exit status, reported to the leader (None when the gang ended before it started)."""
        refused = self._refusal(out)
        if refused:
            self.gang.report_end(self.node_rank, exit_status.BAD_INPUT, refused)
            return exit_status.BAD_INPUT
        started = self._await_start()
        if started is None:
            return None
        proc = self.launch(out / "plan.json", out,
                           Rendezvous(started.nodes, self.node_rank, started.endpoint, started.run_id, self.address))
        renewed_at, interrupted_at, drain_asked, dumped = time.monotonic(), 0.0, False, False
        try:
            for now in while_running(proc):
                if now - renewed_at >= MEMBER_RENEW_INTERVAL_S:
                    if not self.gang.renew(self.node_rank, self.host_id):
                        log.warning("gang.member_key_lost")  # the leader counts this node lost: stop at once
                        break
                    renewed_at = now
                view = self.gang.view()
                if view is not None and view.state == DUMPING and not dumped:
                    ask_for_stacks(proc.pid)  # node 0 found the run hung and collects every rank's stacks
                    dumped = True
                if dumped and (view is None or view.state == STOPPING):
                    break  # a hung run has no checkpoint to write: its ranks are killed at once
                if (view is None or view.state == STOPPING) and not interrupted_at:
                    proc.send_signal(signal.SIGUSR1)  # the leader stopped the run (or the gang is gone)
                    interrupted_at = now
                if interrupted_at and now - interrupted_at > STOP_GRACE_S:
                    break
                if self.stopping.is_set() and not drain_asked:
                    self.gang.ask_to_stop(self.node_rank, f"host {self.host_id} is shutting down")
                    drain_asked = True
        finally:
            kill_group(proc.pid)
            proc.wait()
        self.gang.report_end(self.node_rank, proc.returncode)
        return proc.returncode

    def _refusal(self, out: Path) -> str:
        """Why this host cannot be a node of the run ("" when it can): its output must be writable here, and be
        the very storage node 0 writes (the marker node 0 left there)."""
        view = self.gang.view()
        if view is None:
            return ""
        try:
            self.roots.writable("output_uri", out)
            check_output(out, self.gang.job_id, self.roots.output)
        except PlanError as e:
            return f"on host {self.host_id}: {e}"
        try:
            seen = (out / GANG_MARKER).read_text()
        except OSError:
            seen = ""
        if seen != view.marker:
            return (f"host {self.host_id} does not see node 0's files in {out}: a multi-node job's output must be on "
                    "storage every host of the gang mounts at the same path (workers with --work-dir-shared on it)")
        return ""

    def _await_start(self) -> GangView | None:
        """Wait, renewing this member's key, until the leader starts the gang (None when it ends first, or this
        host is shutting down: then the leader is told, and forms the gang again later)."""
        renewed_at = time.monotonic()
        while True:
            view = self.gang.view()
            if view is None or view.state == STOPPING:
                return None
            if view.state == RUNNING:
                return view
            if self.stopping.is_set():
                self.gang.ask_to_stop(self.node_rank, f"host {self.host_id} is shutting down")
                return None
            if time.monotonic() - renewed_at >= MEMBER_RENEW_INTERVAL_S:
                if not self.gang.renew(self.node_rank, self.host_id):
                    return None
                renewed_at = time.monotonic()
            time.sleep(SUPERVISE_POLL_S)

"""Node 0's side of a multi-node gang (fleet.gangs): waiting for it to form, then the watch over the other nodes
while it runs — what stops the run at once, and which node broke it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tunefleet.v1 import progress_pb2

from contract.rendezvous import Rendezvous
from executor.worker.supervision import (
    SUPERVISE_POLL_S,
    Finished,
    LeaseLost,
    Outcome,
    Requeue,
    RetryLater,
    Stop,
    node_log_tail,
)
from fleet.gangs import MEMBER_TTL_S, Gang, GangView


@dataclass
class GangLead:
    """Read once per supervision poll of node 0's own tree."""

    gang: Gang
    view: GangView
    rendezvous: Rendezvous  # node 0's
    out: Path

    def check(self) -> Outcome | None:
        """What must stop the run at once: a member lost (a retry, counted) or a member whose run failed."""
        self.gang.keep()
        view = self.gang.view()
        if view is None:
            return RetryLater("the gang's record vanished from Redis while it ran", infra_failure=True)
        self.view = view
        lost = self.gang.lost(view)
        if lost:
            return self._lost(lost)
        failed = sorted(k for k, end in view.ended.items() if end.exit_code != 0)
        return self._failed(failed) if failed else None

    def drain_request(self) -> Stop | None:
        """A member's host is shutting down: the whole gang checkpoints and the job is requeued."""
        if not self.view.draining:
            return None
        k, why = min(self.view.draining.items())
        return Stop(Requeue(f"node {k} of the gang: {why}; requeued to resume from its last checkpoint"),
                    checkpoint_first=True)

    def settle(self, keep_lease: Callable[[], LeaseLost | None]) -> Outcome:
        """Node 0's ranks ended without a terminal event: wait until every member has ended or is known lost (at
        most MEMBER_TTL_S, holding the job's lease meanwhile), then say which node broke the run."""
        until = time.monotonic() + MEMBER_TTL_S + 1.0
        while True:
            lease_lost = keep_lease()
            if lease_lost is not None:
                return lease_lost
            view = self.gang.view() or self.view
            lost = self.gang.lost(view)
            if lost:
                return self._lost(lost)
            if len(view.ended) >= view.nodes - 1 or time.monotonic() > until:
                break
            time.sleep(SUPERVISE_POLL_S)
        self.view = view
        return self._failed(sorted(k for k, end in view.ended.items() if end.exit_code != 0))

    def _lost(self, ranks: list[int]) -> RetryLater:
        hosts = ", ".join(f"node {k} (host {self.view.members[k]})" for k in ranks)
        return RetryLater(f"{hosts} of the gang was lost (stopped renewing within {MEMBER_TTL_S:g} s); every node's "
                          "ranks were stopped", infra_failure=True)

    def _failed(self, ranks: list[int]) -> Finished:
        """FAILED, quoting the log of each failed member and of node 0 (the first error may be on either)."""
        refused = [k for k in ranks if self.view.ended[k].message]
        if refused:  # a member refused before it launched anything: that is the whole story
            k = refused[0]
            return Finished(progress_pb2.PHASE_FAILED, f"node {k} (host {self.view.members.get(k, '?')}) refused "
                                                       f"the job: {self.view.ended[k].message}")
        parts = [f"node {k} (host {self.view.members.get(k, '?')}) exited with status "
                 f"{self.view.ended[k].exit_code}; its last lines ({self.out / 'logs'}):\n"
                 f"{node_log_tail(self.out, k)}" for k in ranks]
        parts.append(f"node 0's last lines:\n{node_log_tail(self.out, 0)}")
        return Finished(progress_pb2.PHASE_FAILED, "the multi-node run failed: " + "\n".join(parts))


def wait_for_gang(gang: Gang, gang_timeout_s: float, held_back: Callable[[], Outcome | None]) -> GangView | Outcome:
    """Wait for every member to join, keeping the gang alive; why not, as an Outcome. `held_back` keeps the job's
    lease and says what stops the job meanwhile (a lost lease, a Cancel, a drain, the job's timeout)."""
    give_up_at = time.monotonic() + gang_timeout_s
    while True:
        view = gang.view()
        if view is None:
            return RetryLater("the gang's record vanished from Redis while it formed")
        refused = {k: e for k, e in view.ended.items() if e.message}
        if refused:
            k, end = min(refused.items())
            return Finished(progress_pb2.PHASE_FAILED, f"node {k} (host {view.members.get(k, '?')}) refused the "
                                                       f"job: {end.message}")
        if view.draining:
            k, why = min(view.draining.items())
            return RetryLater(f"node {k} left the forming gang: {why}")
        if view.complete:
            return view
        stopped = held_back()
        if stopped is not None:
            return stopped
        gang.keep()
        if time.monotonic() > give_up_at:
            return RetryLater(f"its gang did not form within {gang_timeout_s:g} s ({len(view.members)} of "
                              f"{view.nodes} hosts joined; the others were busy)")
        time.sleep(SUPERVISE_POLL_S)

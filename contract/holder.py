"""The one question a training run asks the fleet: "does this run still hold its job?"

A fleet worker holds each job it runs under a lease with a fencing token (fleet.leases). Before rank 0 writes
anything another holder could also write — a progress event, a checkpoint seal — it asks its worker, which
checks the token in Redis. Training itself never talks to Redis: the worker serves the answer on a Unix socket
whose path it puts in TUNEFLEET_HOLDER_SOCKET for the run; a run started by hand (no such variable) owns its
output directory and is always the holder.

Wire format, one exchange per connection: the run sends `confirm\n`; the worker answers one line,
`held <fence>` (this run may write), `lost <why>` (another host runs the job now: write nothing, stop) or
`unknown <why>` (Redis cannot say now: a checkpoint waits for the next one, an event goes to the file, and the
worker publishes it later under its own fence, which Redis refuses if it is stale). No worker listening on the
socket any more counts as `lost`: the worker died, and the run is about to die with it.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Protocol

from contract.errors import LeaseLostError

HOLDER_SOCKET_ENV = "TUNEFLEET_HOLDER_SOCKET"
REQUEST = b"confirm\n"
HELD, LOST, UNKNOWN = "held", "lost", "unknown"
# How long a run waits for its worker's answer; past it the answer is "unknown" (the worker is busy or gone).
ANSWER_TIMEOUT_S = 10.0
# After an "unknown", the run does not ask again for this long (it counts as "unknown"), so a Redis outage
# costs training one slow answer per interval, not one per event.
UNKNOWN_RETRY_S = 5.0
MAX_ANSWER_BYTES = 4096


class Holder(Protocol):
    @property
    def fence(self) -> int:
        """The fencing token the run holds its job by (0 outside the fleet, or before the first confirm)."""
        ...

    def confirm(self) -> bool:
        """True when this run may write; False when that cannot be confirmed now; LeaseLostError when the job
        belongs to another run."""
        ...


class OwnDirectory:
    """A run outside the fleet: it owns its output directory."""

    fence = 0

    def confirm(self) -> bool:
        return True


class WorkerHolder:
    """Asks the worker that started this run, over its Unix socket."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fence = 0
        self._ask_after = 0.0  # monotonic time before which the last "unknown" stands

    def confirm(self) -> bool:
        if time.monotonic() < self._ask_after:
            return False
        held = self._ask()
        if not held:
            self._ask_after = time.monotonic() + UNKNOWN_RETRY_S
        return held

    def _ask(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(ANSWER_TIMEOUT_S)
                s.connect(str(self.path))
                s.sendall(REQUEST)
                answer = s.makefile("rb").readline(MAX_ANSWER_BYTES).decode(errors="replace").strip()
        except (FileNotFoundError, ConnectionRefusedError) as e:
            # the worker that supervises this run is gone: its job will be run again elsewhere, and the run's
            # process group dies with it; an event written now could never be published
            raise LeaseLostError(f"the worker that runs this job is gone ({e})") from e
        except OSError:
            return False  # the worker did not answer in time
        verdict, _, detail = answer.partition(" ")
        if verdict == HELD:
            self.fence = int(detail or 0)
            return True
        if verdict == LOST:
            raise LeaseLostError(detail or "another host runs the job now")
        return False


def holder_from_environment() -> Holder:
    path = os.environ.get(HOLDER_SOCKET_ENV)
    return WorkerHolder(Path(path)) if path else OwnDirectory()


def answer(verdict: str, detail: str | int = "") -> bytes:
    """One answer line of the wire format (the worker's side)."""
    return f"{verdict} {detail}".strip().encode()[:MAX_ANSWER_BYTES - 1] + b"\n"

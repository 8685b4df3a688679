"""A child process that must not outlive its parent: Linux's parent-death signal."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>: the signal this process gets when its parent dies


def die_with_parent(orphan_exit_code: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (a process in a session or group of its own is
    out of reach of signals to its parent's group); exit at once with `orphan_exit_code` when the parent already
    died. Does nothing off Linux."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request took hold
        os._exit(orphan_exit_code)

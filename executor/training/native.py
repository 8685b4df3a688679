"""Native code that kills a rank, said in words.

CPUs that advertise AMX but cannot run it: on such a host every bf16 matmul in torch (oneDNN) dies with SIGILL.
Found once per environment and CPU by a tiny bf16 matmul in a child process; where it dies, the ranks run with
oneDNN capped below AMX (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16, the next ISA down, which such CPUs do run).
A rank killed by a signal is reported with the signal's name and what it usually means."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import structlog

log = structlog.get_logger("executor.training.native")
ISA_ENV = "ONEDNN_MAX_CPU_ISA"
SAFE_ISA = "AVX512_CORE_BF16"
PROBE = ("import torch; a = torch.ones(64, 64, dtype=torch.bfloat16); "
         "torch.nn.functional.linear(a, a).sum().item()")
PROBE_TIMEOUT_S = 120.0
CACHE = Path(sys.prefix) / "tunefleet-cpu-isa.json"
T = TypeVar("T")


def _cpu_key() -> str:
    """What an answer kept for this CPU depends on: the CPU's flags, Python and the installed torch (its oneDNN)."""
    try:
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return hashlib.sha256(f"{flags}|{sys.version}|{_torch_version()}".encode()).hexdigest()[:16]


def _torch_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("torch")
    except PackageNotFoundError:
        return ""


def for_this_cpu(cache: Path, compute: Callable[[], T]) -> T:
    """`compute`'s answer, kept in `cache` (JSON) and read back while the CPU and environment (_cpu_key) are the same;
    an unreadable or foreign cache is computed anew."""
    key = _cpu_key()
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        known = json.loads(cache.read_text())
        if known["key"] == key:
            return known["value"]  # type: ignore[no-any-return]
    value = compute()
    with contextlib.suppress(OSError, TypeError, ValueError):
        cache.write_text(json.dumps({"key": key, "value": value}))
    return value


def isa_cap(environ: Mapping[str, str] = os.environ, probe: Sequence[str] = (sys.executable, "-c", PROBE),
            cache: Path = CACHE) -> dict[str, str]:
    """The environment the ranks need on this CPU: {ISA_ENV: SAFE_ISA} where a bf16 matmul dies with SIGILL,
    else {} (also when the user set ISA_ENV themselves)."""
    if ISA_ENV in environ:
        return {}
    cap = for_this_cpu(cache, lambda: _probe(probe))
    return {ISA_ENV: cap} if cap else {}


def _probe(probe: Sequence[str]) -> str:
    """SAFE_ISA where the probe dies with SIGILL, else ''."""
    try:
        code = subprocess.run(list(probe), capture_output=True, timeout=PROBE_TIMEOUT_S).returncode
    except subprocess.TimeoutExpired:
        code = 0
    cap = SAFE_ISA if code == -signal.SIGILL else ""
    if cap:
        log.warning("cpu.amx_unusable", detail=f"a bf16 matmul died with SIGILL on this CPU: ranks run with "
                                               f"{ISA_ENV}={cap}")
    return cap


# What a signal that killed a rank usually means, for the failure message.
_MEANINGS = {
    signal.SIGILL: f"illegal instruction: the CPU could not run an instruction the code used (a CPU that "
                   f"advertises AMX but cannot run it: set {ISA_ENV}={SAFE_ISA})",
    signal.SIGKILL: "killed: often the kernel's out-of-memory killer (see dmesg), or a kill -9",
    signal.SIGSEGV: "segmentation fault: a crash in native code (a library bug or a corrupt file)",
    signal.SIGABRT: "aborted: native code gave up (an assertion, or a collective whose peer died)",
    signal.SIGBUS: "bus error: often shared memory (/dev/shm) too small, or a file truncated while mapped",
    signal.SIGFPE: "arithmetic error in native code",
    signal.SIGTERM: "terminated: asked to stop",
}


def describe_signal(number: int) -> str:
    """'SIGILL (illegal instruction: …)' for a signal number."""
    try:
        sig = signal.Signals(number)
    except ValueError:
        return f"signal {number}"
    return f"{sig.name} ({_MEANINGS.get(sig, signal.strsignal(sig) or sig.name)})"


def killing_signal(exit_status: int) -> str:
    """'' or, for a rank's negative exit status (a signal killed it), which signal and what it means."""
    return f"a rank was killed by {describe_signal(-exit_status)}" if exit_status < 0 else ""

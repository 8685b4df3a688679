"""Issue 23, item 9: a CPU whose AMX dies with SIGILL gets its ranks capped below AMX (found once, cached), and a
rank killed by a signal is reported with the signal's name and meaning. No such CPU here: the probe is a child
that kills itself with SIGILL, the same exit status the real probe has on one."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from executor.training import native

DIES = (sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)")
RUNS = (sys.executable, "-c", "pass")


def test_a_probe_killed_by_sigill_caps_the_isa_once_and_the_answer_is_cached(tmp_path: Path) -> None:
    cache = tmp_path / "isa.json"
    assert native.isa_cap({}, DIES, cache) == {native.ISA_ENV: native.SAFE_ISA}
    assert native.isa_cap({}, RUNS, cache) == {native.ISA_ENV: native.SAFE_ISA}  # cached: not probed again
    assert native.isa_cap({}, RUNS, tmp_path / "other.json") == {}
    assert native.isa_cap({native.ISA_ENV: "AVX2"}, DIES, tmp_path / "third.json") == {}  # the user's own choice


def test_the_real_probe_runs_on_this_cpu(tmp_path: Path) -> None:
    """The bf16 matmul the probe runs works here (else this machine would need the cap, and say so)."""
    assert native.isa_cap({}, cache=tmp_path / "isa.json") == {}


def test_a_rank_killed_by_a_signal_is_named_with_its_meaning() -> None:
    said = native.killing_signal(-4)  # a rank's exit status when SIGILL killed it
    assert said.startswith("a rank was killed by SIGILL (illegal instruction") and native.SAFE_ISA in said
    assert "out-of-memory killer" in native.describe_signal(9)
    assert native.killing_signal(1) == "" and native.killing_signal(0) == ""


def test_an_answer_kept_for_this_cpu_is_read_back_and_one_for_another_cpu_or_unreadable_is_computed_anew(
        tmp_path: Path) -> None:
    computed: list[int] = []

    def compute() -> dict[str, Any]:
        computed.append(1)
        return {"arch": "X86_64", "flags": ["avx2", "avx512f"]}

    cache = tmp_path / "cpuinfo.json"
    first = native.for_this_cpu(cache, compute)
    assert first == {"arch": "X86_64", "flags": ["avx2", "avx512f"]} and len(computed) == 1
    assert native.for_this_cpu(cache, compute) == first and len(computed) == 1, "computed again on the same CPU"
    cache.write_text(json.dumps({"key": "another cpu", "value": {"arch": "ARM_8", "flags": []}}))
    assert native.for_this_cpu(cache, compute) == first and len(computed) == 2, "another CPU's answer was reused"
    cache.write_text("{not json")
    assert native.for_this_cpu(cache, compute) == first and len(computed) == 3

"""Issue 23, item 10: one ninja builds and checks DeepSpeed's CPU ops (two of different log versions discarded each
other's logs and rebuilt the ops on the first job, silently); a start that must build them can say so; and the CPU
description the op builders ask py-cpuinfo for (a Python process of its own each time) is asked once per CPU."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from executor.training.extensions import CPU_OPS, ops_to_build, remember_cpu_info
from executor.training.process import TORCH_EXTENSIONS_DIR


def test_the_environments_own_ninja_comes_first() -> None:
    assert shutil.which("ninja") == str(Path(sys.prefix) / "bin" / "ninja")


def test_ops_that_make_install_built_are_current_and_missing_ones_are_named(tmp_path: Path) -> None:
    assert ops_to_build(TORCH_EXTENSIONS_DIR) == []  # built by make install with the same ninja: nothing to do
    assert ops_to_build(tmp_path) == list(CPU_OPS.values())


def test_deepspeeds_op_builders_read_the_kept_cpu_description(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cpuinfo
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("FusedAdamBuilder")
    flags = (builder.cpu_arch(), builder.simd_width())  # py-cpuinfo asked in a process of its own, as DeepSpeed does
    asked: list[int] = []
    real = cpuinfo.get_cpu_info

    def counted() -> dict[str, Any]:
        asked.append(1)
        return real()  # type: ignore[no-any-return]

    monkeypatch.setattr(cpuinfo, "get_cpu_info", counted)
    remember_cpu_info(tmp_path / "cpuinfo.json")
    remember_cpu_info(tmp_path / "cpuinfo.json")  # once is enough: a second call changes nothing
    assert (builder.cpu_arch(), builder.simd_width()) == flags
    assert (builder.cpu_arch(), builder.simd_width()) == flags
    assert len(asked) == 1, f"py-cpuinfo asked {len(asked)} times"

"""Issue 23, item 10: one ninja builds and checks DeepSpeed's CPU ops (two of different log versions discarded each
other's logs and rebuilt the ops on the first job, silently); a start that must build them can say so."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from executor.training import TORCH_EXTENSIONS_DIR
from executor.training.extensions import CPU_OPS, ops_to_build


def test_the_environments_own_ninja_comes_first() -> None:
    assert shutil.which("ninja") == str(Path(sys.prefix) / "bin" / "ninja")


def test_ops_that_make_install_built_are_current_and_missing_ones_are_named(tmp_path: Path) -> None:
    assert ops_to_build(TORCH_EXTENSIONS_DIR) == []  # built by make install with the same ninja: nothing to do
    assert ops_to_build(tmp_path) == list(CPU_OPS.values())

"""DeepSpeed's CPU ops: which of them the next start must compile (so a run can say so, instead of sitting
silently in LOADING for minutes). Built once per environment by `make install`, with the environment's ninja
(executor.training puts it first on PATH)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from executor.training import TORCH_EXTENSIONS_DIR

# The op builders a CPU run loads: shared-memory collectives (deepspeed.init_distributed) and the CPU Adam.
CPU_OPS = {"ShareMemCommBuilder": "deepspeed_shm_comm", "FusedAdamBuilder": "fused_adam"}
NINJA_CHECK_S = 30.0


def _out_of_date(directory: Path, name: str) -> bool:
    if not (directory / f"{name}.so").is_file() or not (directory / "build.ninja").is_file():
        return True
    ninja = shutil.which("ninja")
    if ninja is None:
        return False  # torch cannot build without ninja either; the load itself will say so
    try:
        dry = subprocess.run([ninja, "-n", "-C", str(directory)], capture_output=True, text=True,
                             timeout=NINJA_CHECK_S)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "no work to do" not in dry.stdout


def ops_to_build(root: Path = TORCH_EXTENSIONS_DIR) -> list[str]:
    """The CPU ops the next DeepSpeed start compiles before training (empty when all are built and current)."""
    return [name for name in CPU_OPS.values() if _out_of_date(root / name, name)]

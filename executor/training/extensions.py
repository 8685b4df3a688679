"""DeepSpeed's CPU ops: which of them the next start must compile (so a run can say so, instead of sitting
silently in LOADING for minutes). Built once per environment by `make install`, with the environment's ninja
(executor.training.process puts it first on PATH).

Loading an op asks py-cpuinfo for the CPU's architecture and flags (the builder's -march and SIMD flags, which
ninja compares with the build's), and py-cpuinfo answers by running a Python process of its own: 1.1 s a question,
two questions a CPU rank (the CPU Adam), every run. The answer depends only on the CPU and the environment, so a
rank asks once per environment and CPU (keyed as the ISA probe is, executor.training.native) and keeps the answer.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path

from executor.training.native import for_this_cpu
from executor.training.process import TORCH_EXTENSIONS_DIR

# The op builders a CPU run loads: shared-memory collectives (deepspeed.init_distributed) and the CPU Adam.
CPU_OPS = {"ShareMemCommBuilder": "deepspeed_shm_comm", "FusedAdamBuilder": "fused_adam"}
NINJA_CHECK_S = 30.0
CPU_INFO_CACHE = Path(sys.prefix) / "tunefleet-cpuinfo.json"


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


def remember_cpu_info(cache: Path = CPU_INFO_CACHE) -> None:
    """Make py-cpuinfo's get_cpu_info (which DeepSpeed's op builders import when they load an op) answer from
    `cache`; without py-cpuinfo, nothing changes (DeepSpeed then reads lscpu)."""
    try:
        import cpuinfo
    except ImportError:
        return
    if isinstance(cpuinfo.get_cpu_info, functools.partial):
        return  # already remembering
    cpuinfo.get_cpu_info = functools.partial(for_this_cpu, cache, cpuinfo.get_cpu_info)

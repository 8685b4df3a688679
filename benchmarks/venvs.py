"""The virtualenvs layered over .venv for libraries whose pins fight .venv's (each its own requirements file and make
target): a module run in one of them, its printed JSON parsed (`in_venv`)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

_REPOSITORY = Path(__file__).resolve().parent.parent
# what one run in a layered virtualenv may take: a full-size row simulates in about a minute
VENV_RUN_TIMEOUT_S = 600
# the layered virtualenvs, by directory, and the make target that builds each
TORCHTUNE = (".venv-torchtune", "torchtune-env")  # torchtune 0.6.1 (requirements-torchtune.txt)
LEGACY = (".venv-legacy", "legacy-env")  # transformers 4.45.2's Trainer stack (requirements-legacy.txt)


class VenvError(RuntimeError):
    """A layered virtualenv is missing, or a run in it failed."""


def in_venv(venv: tuple[str, str], *args: str) -> Any:
    """`python -m <args>` in the virtualenv `venv` (TORCHTUNE, LEGACY); the last line it prints (JSON), parsed."""
    directory, target = venv
    python = _REPOSITORY / directory / "bin" / "python"
    if not python.exists():
        raise VenvError(f"{python} is missing: run make {target}")
    env = {**os.environ, "DS_ACCELERATOR": "cpu"}
    done = subprocess.run([str(python), "-m", *args], capture_output=True, text=True, env=env,
                          timeout=VENV_RUN_TIMEOUT_S, check=False, cwd=_REPOSITORY)
    if done.returncode != 0:
        raise VenvError(f"python -m {' '.join(args)} in {directory} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])

"""The README's sample outputs are what the commands print today (house style, habit 17): every `$ tunefleet ...`
line in a README code block is run, and the lines under it must be its output. A `...` line stands for lines
left out: what is above it must begin the output, what is below it must end it.

When a change moves a figure, the failure shows the whole output to paste into the README."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
_FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.M | re.S)


def _samples() -> list[tuple[str, list[str]]]:
    """(command, the lines the README shows under it) for every `$ tunefleet` line in a code block."""
    found = []
    for block in _FENCE.findall(README.read_text()):
        command, shown = None, []
        for line in [*block.splitlines(), "$ "]:
            if line.startswith("$ "):
                while shown and not shown[-1]:  # a blank line between two samples belongs to neither
                    shown.pop()
                if command is not None:
                    found.append((command, shown))
                command, shown = (line[2:] if line.startswith("$ tunefleet ") else None), []
            elif command is not None:
                shown.append(line)
    return found


SAMPLES = _samples()


def test_the_readme_shows_samples() -> None:
    assert len(SAMPLES) >= 2


@pytest.mark.parametrize(("command", "shown"), SAMPLES, ids=[c for c, _ in SAMPLES])
def test_a_readme_sample_is_what_the_command_prints(command: str, shown: list[str]) -> None:
    argv = shlex.split(command)[1:]
    out = subprocess.run([sys.executable, "-m", "launch", *argv], capture_output=True, text=True, timeout=120)
    printed = out.stdout.rstrip("\n").splitlines()
    if "..." in shown:
        cut = shown.index("...")
        head, tail = shown[:cut], shown[cut + 1:]
        ok = printed[:len(head)] == head and (not tail or printed[-len(tail):] == tail)
    else:
        ok = printed == shown
    assert ok, f"the README's sample of `{command}` is stale; it prints now:\n" + "\n".join(printed)

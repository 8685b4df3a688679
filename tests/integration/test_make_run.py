"""Issue 50 item 15: the README's `make run` sample is what `make run` prints today. The demo runs for real (its own
redis-server, planner, executor, worker and dashboard; a tiny job trained to DONE on the CPU) with its state in a
temporary folder; the sample's lines must appear in its output, in order, a `...` line standing for lines left out.
What changes from run to run (ports, times, ids, measured figures) is masked on both sides; everything else, the
planner's figure included, must match."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.training, pytest.mark.timeout(300)]
README = Path(__file__).resolve().parents[2] / "README.md"
# (pattern, what stands for it): every line
_VOLATILE = [(re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:PORT"),
             (re.compile(r"demo-\d{8}-\d{6}"), "demo-JOB"),
             (re.compile(r"demo-[\w.-]+?-\d+\b"), "demo-HOST"),
             (re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}"), "TIME")]
_NUMBER = re.compile(r"[+-]?\d[\d,]*(\.\d+)?")  # signed too: a measured error is +N % one run, -N % the next


def _masked(line: str) -> str:
    for pattern, stand_in in _VOLATILE:
        line = pattern.sub(stand_in, line)
    if not line.startswith("==> planner:"):  # measured figures, steps and timings vary; the planner's do not
        line = _NUMBER.sub("N", line)
    return re.sub(r"[ ─━-]+", " ", line).strip()


def _readme_sample() -> list[str]:
    text = README.read_text()
    start = text.index("What the first `make run` prints")
    block = text[text.index("```\n", start) + 4:]
    return block[:block.index("```")].splitlines()


def test_the_readme_make_run_sample_is_what_make_run_prints(tmp_path):
    state = tmp_path / "state"
    run = subprocess.run([sys.executable, "-m", "devtools.demo", "--steps", "20", "--state-dir", str(state)],
                         capture_output=True, text=True, timeout=280, cwd=README.parent)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    printed = [_masked(line.replace(str(state.resolve()), ".tunefleet")) for line in run.stdout.splitlines()]
    assert not [line for line in run.stderr.splitlines() if line.strip()], f"make run printed noise:\n{run.stderr}"
    chunks = [[]]  # the sample's runs of consecutive lines
    for line in _readme_sample():
        if line.strip() == "...":
            chunks.append([])
        else:
            chunks[-1].append(_masked(line))
    at = 0
    for chunk in chunks:
        found = next((i for i in range(at, len(printed) - len(chunk) + 1) if printed[i:i + len(chunk)] == chunk),
                     None)
        assert found is not None, ("the README's make run sample is stale: not found in order:\n" + "\n".join(chunk)
                                   + "\n\nmake run prints now:\n" + run.stdout)
        at = found + len(chunk)

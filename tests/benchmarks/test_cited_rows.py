"""The planner's comments cite the simulated rows that hold each finding (benchmarks/results/simulate.csv, written by
`make bench-simulate`) instead of carrying the figures: every row cited must be a row of that file."""

from __future__ import annotations

import csv
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a quoted row label, "<recipe> <model> <method>[targets] mb<batch>x<tokens> [ckpt] <attention> z<stage>|fsdp<n>
# x<ranks>" (benchmarks/simulate_rows.py); a label may wrap onto the next comment line
_LABEL = re.compile(r"'([^'\s][^']*? mb\d+x\d+ [^']*?(?:z[0-3]|fsdp\d) x\d+)'")


def _joined(text: str) -> str:
    """Source text with comment and docstring line breaks folded into single spaces."""
    return re.sub(r"\s*\n\s*#?\s*", " ", text)


def test_every_cited_simulated_row_is_in_the_results() -> None:
    rows = {r["row"] for r in csv.DictReader((ROOT / "benchmarks/results/simulate.csv").open())}
    cited = {}
    for path in sorted((ROOT / "planner").glob("*.py")):
        for label in _LABEL.findall(_joined(path.read_text())):
            if "..." not in label:  # an abbreviation of the row before it
                cited[label] = path.name
    assert len(cited) >= 10, f"the citations were not found: {cited}"
    missing = {label: where for label, where in cited.items() if label not in rows}
    assert not missing, f"cited rows simulate.csv does not have: {missing}"

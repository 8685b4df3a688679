"""Issue 23, items 4 and 5: dataset lines and config.json files that used to cost minutes and gigabytes, or print
a traceback, are refused by line or flag, with the exit code for bad input."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from contract.errors import PlanError
from contract.limits import MAX_RECORD_BYTES
from contract.run_config import DatasetConfig
from devtools.tiny import make_plan, write_plan
from executor.training import data


def _refusal(path: Path) -> str:
    with pytest.raises(PlanError) as info:
        data.load_records(DatasetConfig(local_path=str(path)))
    assert info.value.field == "dataset.local_path"
    return info.value.description


@pytest.mark.parametrize(("line", "words"), [
    (b'{"text": "caf\xe9"}\n', "is not UTF-8 (byte 0xe9"),
    (b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n", "nests deeper"),
    (b'{"text": "x", "n": ' + b"9" * 5000 + b"}\n", "not usable JSON"),
    (b"[1, 2]\n", "not a JSON object"),
    (b'{"text": \n', "not JSON"),
])
def test_lines_that_are_not_records_are_refused_by_line(tmp_path: Path, line: bytes, words: str) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"text": "fine"}\n' + line)
    description = _refusal(path)
    assert "line 2" in description and words in description, description


def test_a_huge_single_line_is_refused_while_reading(tmp_path: Path) -> None:
    path = tmp_path / "one-line.jsonl"
    with path.open("wb") as f:
        f.write(b'{"text": "')
        chunk = b"a" * 2**20
        for _ in range(100):  # 100 MB, no newline
            f.write(chunk)
        f.write(b'"}\n')
    tracemalloc.start()
    try:
        description = _refusal(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f"longer than {MAX_RECORD_BYTES:,} bytes" in description and "line 1" in description
    assert peak < 4 * MAX_RECORD_BYTES, peak  # it read one record's worth, not the line


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launch", *args], capture_output=True, text=True, timeout=300)


def test_fit_refuses_config_files_it_cannot_read_with_exit_2(tmp_path: Path) -> None:
    latin = tmp_path / "latin"
    latin.mkdir()
    (latin / "config.json").write_bytes(b'{"model_type": "llama", "name": "caf\xe9"}')
    huge = tmp_path / "huge"
    huge.mkdir()
    with (huge / "config.json").open("wb") as f:
        f.truncate(50 * 2**20)  # 50 MB (sparse: nothing is written)
    for folder, words in ((latin, "is not UTF-8 text"), (huge, "52,428,800 bytes")):
        proc = _cli("fit", "--model", str(folder), "--gpu", "a100-80gb")
        assert proc.returncode == 2, proc.stderr
        assert words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_train_check_on_a_bad_dataset_line_exits_2_naming_it(tiny_model: Path, tmp_path: Path) -> None:
    dataset = tmp_path / "d.jsonl"
    dataset.write_bytes(b'{"text": "one"}\n{"text": "\xff\xfe"}\n')
    plan = write_plan(make_plan(tiny_model, dataset, tmp_path / "run"), tmp_path / "plan.json")
    proc = _cli("train", "--check", str(plan))
    assert proc.returncode == 2, proc.stderr
    assert "dataset.local_path" in proc.stderr and "line 2 is not UTF-8" in proc.stderr
    assert "Traceback" not in proc.stderr

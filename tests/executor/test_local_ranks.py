"""The ranks of a one-node run started by the launcher itself (executor.training.local_ranks): each gets torchrun's
environment, the run's status is the first failure's, a failure stops the other ranks, and a signal reaches every
rank. Real processes; the training ranks themselves run through it in tests/integration/test_training.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from common.wait import wait_until
from executor.training.local_ranks import STOP_GRACE_S, LocalRanks

ENV_OF_RANK = ("import json, os, sys; print(json.dumps({k: os.environ.get(k) for k in ('RANK', 'LOCAL_RANK', "
               "'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', 'TORCHELASTIC_RUN_ID', "
               "'OMP_NUM_THREADS')}), flush=True)")
# rank 1 fails with `status` at once; rank 0 would block in a collective for it (here: until a signal comes)
ONE_FAILS = "import os, signal, sys; (sys.exit({status}) if os.environ['RANK'] == '1' else signal.pause())"
BLOCKED = "import signal; signal.pause()"  # a rank blocked until a signal ends it


def _ranks(tmp_path: Path, code: str, ranks: int, env: dict[str, str] | None = None) -> tuple[LocalRanks, Path]:
    log_path = tmp_path / "train.log"
    with log_path.open("a") as log:
        return LocalRanks([sys.executable, "-c", code], ranks, env or {"PATH": "/usr/bin:/bin"}, log), log_path


def _wait(ranks: LocalRanks, within_s: float) -> int:
    """The run's exit status, once every rank ended (within `within_s`)."""
    wait_until(lambda: ranks.poll() is not None, within_s)
    status = ranks.poll()
    assert status is not None
    return status


def test_each_rank_gets_torchrun_s_environment_for_one_node(tmp_path: Path) -> None:
    ranks, log = _ranks(tmp_path, ENV_OF_RANK, 2)
    assert _wait(ranks, 60) == 0
    seen = sorted((json.loads(line) for line in log.read_text().splitlines()), key=lambda e: e["RANK"])
    assert [(e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"]) for e in seen] == \
        [("0", "0", "2", "2"), ("1", "1", "2", "2")]
    assert seen[0]["MASTER_ADDR"] == "127.0.0.1" and int(seen[0]["MASTER_PORT"]) > 0
    assert len({(e["MASTER_PORT"], e["TORCHELASTIC_RUN_ID"]) for e in seen}) == 1, "the ranks would not meet"
    assert {e["OMP_NUM_THREADS"] for e in seen} == {"1"}, "two ranks on one node each took a thread per core"
    (tmp_path / "one").mkdir()
    one, log = _ranks(tmp_path / "one", ENV_OF_RANK, 1, {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "4"})
    assert _wait(one, 60) == 0
    assert json.loads(log.read_text())["OMP_NUM_THREADS"] == "4", "the user's own setting was overridden"


@pytest.mark.parametrize("status", [3, 1])
def test_a_failed_rank_stops_the_others_and_its_status_is_the_run_s(tmp_path: Path, status: int) -> None:
    ranks, _ = _ranks(tmp_path, ONE_FAILS.format(status=status), 2)
    assert _wait(ranks, 30 + STOP_GRACE_S) == status
    assert all(p.poll() is not None for p in ranks.processes), "a rank outlived the failed run"
    assert ranks.processes[0].returncode == -signal.SIGTERM


def test_a_rank_killed_by_a_signal_ends_the_run_with_that_signal(tmp_path: Path) -> None:
    ranks, _ = _ranks(tmp_path, BLOCKED, 2)
    ranks.processes[1].send_signal(signal.SIGILL)
    assert _wait(ranks, 30 + STOP_GRACE_S) == -signal.SIGILL


def test_a_signal_to_the_ranks_reaches_every_rank(tmp_path: Path) -> None:
    ranks, _ = _ranks(tmp_path, BLOCKED, 3)
    with pytest.raises(subprocess.TimeoutExpired):
        ranks.wait(0.2)
    ranks.send_signal(signal.SIGTERM)
    assert _wait(ranks, 30) == -signal.SIGTERM
    assert [p.returncode for p in ranks.processes] == [-signal.SIGTERM] * 3

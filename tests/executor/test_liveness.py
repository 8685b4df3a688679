"""The hang watch's pure parts: when silence counts as hung, and where a faulthandler dump says a rank waits."""

from __future__ import annotations

from pathlib import Path

from contract import liveness

DUMP = '''Thread 0x00007f2b1c7fe640 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait
  File "/usr/lib/python3.11/threading.py", line 629 in wait

Current thread 0x00007f2b2f673b80 (most recent call first):
  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2806 in all_reduce
  File "/venv/lib/python3.11/site-packages/deepspeed/comm/torch.py", line 211 in all_reduce
  File "/work/executor/training/recipe.py", line 196 in loop
'''


def test_silence_is_hung_past_the_bound_of_its_phase() -> None:
    beat = liveness.Heartbeat(step=12, step_s=0.5, phase=liveness.TRAINING, at_s=1000.0)
    assert liveness.stalled_s(beat, 1004.0, factor=10, floor_s=3) is None  # 4 s < 10 × 0.5 s
    assert liveness.stalled_s(beat, 1006.0, factor=10, floor_s=3) == 6.0
    assert liveness.stalled_s(beat, 1006.0, factor=10, floor_s=60) is None  # under the floor
    # a write never timed gets CHECKPOINT_FLOOR_FACTOR floors; once timed, factor × its time when that is longer
    first = liveness.Heartbeat(step=12, step_s=0.5, phase=liveness.CHECKPOINTING, at_s=1000.0)
    assert liveness.stalled_s(first, 1000.0 + 3 * liveness.CHECKPOINT_FLOOR_FACTOR, factor=10, floor_s=3) is None
    assert liveness.stalled_s(first, 1010.0, factor=10, floor_s=3) == 10.0
    timed = liveness.Heartbeat(step=12, step_s=0.5, phase=liveness.CHECKPOINTING, at_s=1000.0, checkpoint_s=4.0)
    assert liveness.stalled_s(timed, 1039.0, factor=10, floor_s=3) is None
    assert liveness.stalled_s(timed, 1041.0, factor=10, floor_s=3) == 41.0
    assert liveness.stalled_s(None, 9000.0, factor=10, floor_s=3) is None  # loading: no step yet


def test_a_heartbeat_round_trips_and_an_unreadable_one_is_none(tmp_path: Path) -> None:
    path = liveness.heartbeat_path(tmp_path)
    assert liveness.read_heartbeat(path) is None
    liveness.write_heartbeat(path, 7, 0.25)
    beat = liveness.read_heartbeat(path)
    assert beat is not None and (beat.step, beat.step_s, beat.phase) == (7, 0.25, liveness.TRAINING)
    assert beat.at_s == path.stat().st_mtime
    path.write_text("{not json")
    assert liveness.read_heartbeat(path) is None


def test_the_stuck_frame_is_the_innermost_of_the_thread_that_took_the_signal() -> None:
    assert liveness.stuck_frame(DUMP) == "all_reduce (distributed/distributed_c10d.py:2806)"
    only_threads = DUMP.split("\n\n")[0]
    assert liveness.stuck_frame(only_threads) == "wait (python3.11/threading.py:331)"
    assert liveness.stuck_frame("") is None

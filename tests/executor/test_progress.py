"""The JSON-lines progress sink: stamped, monotonic across restarts, robust to a line cut by a crash."""

from __future__ import annotations

from pathlib import Path

from tunefleet.v1 import progress_pb2

from contract.progress import JsonlProgressSink, describe, log_tail, read_events


def test_sequence_continues_across_sinks_and_skips_a_cut_line(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    sink = JsonlProgressSink(path, "job-1")
    first = sink.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_LOADING))
    sink.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_TRAINING, step=3, total_steps=10, loss=1.5))
    sink.close()
    assert first.job_id == "job-1" and first.sequence == 1 and first.time.seconds > 0
    with path.open("a") as f:
        f.write('{"phase": "PHASE_TRAI')  # a writer killed mid-line
    resumed = JsonlProgressSink(path, "job-1")
    third = resumed.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_DONE))
    resumed.close()
    events = read_events(path)
    assert [e.sequence for e in events] == [1, 2, 3] and third.sequence == 3
    assert events[1].step == 3 and events[1].loss == 1.5


def test_a_sink_opened_before_another_writer_numbers_after_it_once_it_catches_up(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    launcher = JsonlProgressSink(path, "job-1")  # opened when the run starts, written at its end
    rank0 = JsonlProgressSink(path, "job-1")
    for step in (1, 2):
        rank0.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_TRAINING, step=step))
    rank0.close()
    launcher.catch_up()
    ended = launcher.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_FAILED))
    launcher.close()
    assert ended.sequence == 3
    assert [e.sequence for e in read_events(path)] == [1, 2, 3]


def test_describe_is_one_readable_line() -> None:
    line = describe(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_TRAINING, step=5, total_steps=10, loss=0.25,
                                               tokens_per_s=1234.0, eta_s=60))
    assert line == "[training]  step 5/10  loss 0.2500  1,234 tok/s  eta 60 s"


def test_a_log_tail_leaves_out_nanobind_leak_reports(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("step 3\nRuntimeError: CUDA out of memory\n" + "nanobind: leaked 3 instances!\n"
                   + ' - leaked type "torch._C.Foo"\n' * 14
                   + "nanobind: this is likely caused by a reference counting issue in the binding code.\n")
    assert log_tail(log, 15) == "step 3\nRuntimeError: CUDA out of memory", "the real reason, not the leak report"

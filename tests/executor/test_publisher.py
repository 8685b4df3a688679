"""The one event path, piece by piece on a real Redis: the worker adopts the fleet's events into progress.jsonl,
publishes what the run writes there in order under its fence (with the Feedback on DONE), and answers the run's
"still the holder?" over its Unix socket; a run that lost its job writes nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis
from google.protobuf import json_format
from tunefleet.v1 import executor_pb2, progress_pb2

from contract.errors import LeaseLostError
from contract.holder import UNKNOWN_RETRY_S, WorkerHolder
from contract.progress import JsonlProgressSink, read_events
from devtools.tiny import make_plan
from executor.worker import holder
from executor.worker.publisher import Publisher
from fleet.connection import HOLDER_RETRY, connect
from fleet.events import EventLog
from fleet.jobs import JobStore, NewJob, now_ms
from fleet.keys import job_key
from fleet.leases import FenceGuard, Leases
from fleet.lifecycle import Lifecycle
from fleet.queues import QueueRef
from tests.executor.worker_steps import take

QUEUED, LOADING, TRAINING = progress_pb2.PHASE_QUEUED, progress_pb2.PHASE_LOADING, progress_pb2.PHASE_TRAINING


@pytest.fixture()
def fleet(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


def _claimed(fleet: redis.Redis, tiny_model: Path, data: Path, out: Path, job_id: str = "job-p") -> int:
    """Submit the job and claim it, as a worker that rq handed it to does; the new fence."""
    plan = make_plan(tiny_model, data, out, plan_id=job_id)
    queue = QueueRef("cpu", executor_pb2.PRIORITY_NORMAL)
    Lifecycle(fleet).submit(NewJob(plan=plan, queue=queue, gpus=1, timeout_s=600, events_max_len=100))
    return take(fleet, job_id, "host-a")


def _publisher(fleet: redis.Redis, out: Path, fence: int, job_id: str = "job-p") -> Publisher:
    return Publisher(EventLog(fleet), out / "progress.jsonl", out / "summary.json", job_id, fence)


def _taken_by_host_b(fleet: redis.Redis, message: str) -> int:
    """The sweeper requeues the job (its QUEUED event next in the stream) and host-b claims it: the new fence."""
    fleet.hincrby(job_key("job-p"), "fence", 1)
    EventLog(fleet).publish(progress_pb2.ProgressEvent(job_id="job-p", sequence=EventLog(fleet).last_sequence("job-p")
                                                       + 1, phase=QUEUED, message=message))
    fleet.hset(job_key("job-p"), "phase", QUEUED)
    fence = Leases(fleet).claim("job-p", "host-b", now_ms(), QUEUED, LOADING)
    assert isinstance(fence, int)
    return fence


def test_the_file_and_the_stream_hold_the_same_events_in_order_with_the_feedback_on_done(
        fleet, tiny_model, counting_data, tmp_path):
    fence = _claimed(fleet, tiny_model, counting_data, tmp_path)
    publisher = _publisher(fleet, tmp_path, fence)
    publisher.adopt()
    assert [e.phase for e in read_events(tmp_path / "progress.jsonl")] == [QUEUED], "the fleet's QUEUED adopted"
    took = publisher.emit(progress_pb2.ProgressEvent(phase=LOADING, message="host-a took the job"))
    assert took.sequence == 2
    rank0 = JsonlProgressSink(tmp_path / "progress.jsonl", "job-p")  # what rank 0 opens: numbers after the file
    for step in (1, 2):
        rank0.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_TRAINING, step=step))
    feedback = progress_pb2.Feedback(measured_step_time_s=0.25, library_versions={"torch": "2.13.0"})
    (tmp_path / "summary.json").write_text(json.dumps({"feedback": json_format.MessageToDict(feedback)}))
    rank0.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_DONE, step=2))
    rank0.close()
    assert publisher.pump()
    stream = EventLog(fleet).read_after("job-p", 0, 100)
    assert [e.sequence for e in stream] == [e.sequence for e in read_events(tmp_path / "progress.jsonl")] \
        == [1, 2, 3, 4, 5]
    job = JobStore(fleet).get("job-p")
    assert job.phase == progress_pb2.PHASE_DONE and job.feedback == feedback
    assert publisher.pump(), "publishing again changes nothing"
    assert len(EventLog(fleet).read_after("job-p", 0, 100)) == 5


def test_a_publisher_whose_job_moved_on_publishes_nothing_more(fleet, tiny_model, counting_data, tmp_path):
    fence = _claimed(fleet, tiny_model, counting_data, tmp_path)
    publisher = _publisher(fleet, tmp_path, fence)
    publisher.adopt()
    fleet.hincrby(job_key("job-p"), "fence", 1)  # another claim took the job (a sweep requeued it, a worker took it)
    sink = JsonlProgressSink(tmp_path / "progress.jsonl", "job-p")
    sink.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_TRAINING, step=7))
    sink.close()
    assert publisher.pump() and publisher.lease_lost
    assert [e.phase for e in EventLog(fleet).read_after("job-p", 0, 100)] == [QUEUED]


def test_the_run_asks_its_worker_whether_it_still_holds_the_job(fleet, redis_url, tiny_model, counting_data,
                                                                 tmp_path):
    fence = _claimed(fleet, tiny_model, counting_data, tmp_path)
    with holder.serving(FenceGuard(connect(redis_url, HOLDER_RETRY), "job-p", fence)) as environment:
        asking = WorkerHolder(Path(next(iter(environment.values()))))
        assert asking.confirm() and asking.fence == fence
        sink = JsonlProgressSink(tmp_path / "progress.jsonl", "job-p", holder=asking)
        sink.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_TRAINING, step=1))
        fleet.hincrby(job_key("job-p"), "fence", 1)
        with pytest.raises(LeaseLostError):
            asking.confirm()
        with pytest.raises(LeaseLostError):
            sink.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_TRAINING, step=2))
        sink.close()
    assert [e.step for e in read_events(tmp_path / "progress.jsonl")] == [1], "a run that lost its job wrote on"


def test_when_redis_cannot_say_the_run_goes_on_without_waiting_on_each_event(tmp_path):
    closed = "redis://127.0.0.1:1/0"  # nothing listens on port 1: every check fails at once
    with holder.serving(FenceGuard(connect(closed, HOLDER_RETRY), "job-p", 3)) as environment:
        asking = WorkerHolder(Path(next(iter(environment.values()))))
        started = time.monotonic()
        assert asking.confirm() is False
        assert asking.confirm() is False, "an unknown answer stands for a while"
        assert time.monotonic() - started < UNKNOWN_RETRY_S, "the second answer was asked again"
    with pytest.raises(LeaseLostError, match="worker that runs this job is gone"):
        WorkerHolder(tmp_path / "no-worker.sock").confirm()


def test_a_dead_holder_s_unpublished_events_leave_the_file_and_the_fleet_s_take_their_place(
        fleet, tiny_model, counting_data, tmp_path):
    fence = _claimed(fleet, tiny_model, counting_data, tmp_path)
    first = _publisher(fleet, tmp_path, fence)
    first.adopt()
    first.emit(progress_pb2.ProgressEvent(phase=LOADING, message="host-a took the job"))  # 2, published
    orphans = JsonlProgressSink(tmp_path / "progress.jsonl", "job-p")  # rank 0 after its worker died: 3 and 4
    for step in (1, 2):
        orphans.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_TRAINING, step=step))
    orphans.close()
    # the sweeper requeues the job (its QUEUED takes sequence 3 in the stream) and host-b takes it
    second = _publisher(fleet, tmp_path, _taken_by_host_b(fleet, "requeued"))
    second.adopt()
    second.emit(progress_pb2.ProgressEvent(phase=LOADING, message="host-b took the job"))
    in_file = read_events(tmp_path / "progress.jsonl")
    assert [(e.sequence, e.phase) for e in in_file] == [(1, QUEUED), (2, LOADING), (3, QUEUED), (4, LOADING)]
    assert in_file == EventLog(fleet).read_after("job-p", 0, 100), "the file and the stream disagree"


def test_a_stale_run_that_writes_on_writes_into_a_file_nobody_reads(fleet, tiny_model, counting_data, tmp_path):
    fence = _claimed(fleet, tiny_model, counting_data, tmp_path)
    first = _publisher(fleet, tmp_path, fence)
    first.adopt()
    first.emit(progress_pb2.ProgressEvent(phase=LOADING, message="host-a took the job"))
    # rank 0 of host-a's run; its holder cannot say (host-a paused mid-question, or cut off from Redis): it writes
    stale = JsonlProgressSink(tmp_path / "progress.jsonl", "job-p")
    stale.emit(progress_pb2.ProgressEvent(phase=TRAINING, step=1))
    assert first.pump(), "published while host-a still held the job"
    second = _publisher(fleet, tmp_path, _taken_by_host_b(fleet, "host-a lost"))
    second.adopt()
    second.emit(progress_pb2.ProgressEvent(phase=LOADING, message="host-b took the job"))
    stale.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_TRAINING, step=2))  # host-a wakes
    stale.close()
    assert second.pump()
    in_file = read_events(tmp_path / "progress.jsonl")
    assert [(e.phase, e.step) for e in in_file] == [(QUEUED, 0), (LOADING, 0), (TRAINING, 1), (QUEUED, 0), (LOADING, 0)]
    assert in_file == EventLog(fleet).read_after("job-p", 0, 100), "the file and the stream disagree"


def test_a_stale_worker_does_not_replace_the_file_of_the_host_that_took_its_job(fleet, tiny_model, counting_data,
                                                                               tmp_path):
    stale = _publisher(fleet, tmp_path, _claimed(fleet, tiny_model, counting_data, tmp_path))
    fresh = _publisher(fleet, tmp_path, _taken_by_host_b(fleet, "host-a lost before it adopted"))
    fresh.adopt()
    rank0 = JsonlProgressSink(tmp_path / "progress.jsonl", "job-p")  # host-b's run
    with pytest.raises(LeaseLostError):
        stale.adopt()  # host-a wakes between its claim and its adopt
    rank0.emit(progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_TRAINING, step=1))
    rank0.close()
    assert [e.step for e in read_events(tmp_path / "progress.jsonl")] == [0, 0, 1], "host-b's run writes nowhere"

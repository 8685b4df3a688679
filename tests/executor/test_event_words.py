"""Issue 50 item 6, events read as a user would: a Cancel of a job that ran before (preempted, then waiting to
resume) says so and what it keeps, not "cancelled before it started". A real redis-server."""

from __future__ import annotations

from pathlib import Path

from tunefleet.v1 import executor_pb2, progress_pb2

from contract.progress import new_event
from devtools.tiny import make_plan
from fleet import queues
from fleet.connection import connect
from fleet.jobs import NewJob
from fleet.keys import job_key
from fleet.lifecycle import Lifecycle


def _queued(lifecycle: Lifecycle, tiny_model: Path, data: Path, job_id: str) -> None:
    plan = make_plan(tiny_model, data, Path(job_id), plan_id=job_id)
    lifecycle.submit(NewJob(plan=plan, queue=queues.QueueRef("cpu", executor_pb2.PRIORITY_NORMAL), gpus=1,
                            timeout_s=3600, team="nlp"))


def test_a_cancel_says_whether_the_waiting_job_had_run(redis_url, tiny_model, counting_data) -> None:
    fleet = connect(redis_url)
    lifecycle = Lifecycle(fleet)
    _queued(lifecycle, tiny_model, counting_data, "fresh")
    assert lifecycle.cancel("fresh", "").last_event.message == "cancelled before it started"

    _queued(lifecycle, tiny_model, counting_data, "preempted")  # it ran to step 345, checkpointed 300, was requeued
    fleet.hset(job_key("preempted"), mapping={
        "checkpoint_step": 300, "gpu_seconds": 812.0,
        "last_event": new_event("preempted", 9, progress_pb2.PHASE_QUEUED, step=345).SerializeToString()})
    said = lifecycle.cancel("preempted", "not needed").last_event.message
    assert said == ("cancelled while waiting to resume (it had run to step 345; its checkpoint of step 300 is kept): "
                    "not needed")

"""What `tunefleet fleet` prints: each pending job's place in line and reason, and the fleet's policy."""

from __future__ import annotations

import io
import time

from google.protobuf.timestamp_pb2 import Timestamp
from tunefleet.v1 import executor_pb2, progress_pb2

from clients.fleet_render import feedback_text, fleet_text, follow


def _in(seconds: float) -> Timestamp:
    stamp = Timestamp()
    stamp.FromMilliseconds(int((time.time() + seconds) * 1000))
    return stamp


def test_the_fleet_table_shows_places_reasons_and_the_policy() -> None:
    text = fleet_text(executor_pb2.FleetResponse(
        hosts=[executor_pb2.Host(host_id="gpu-1", gpu_class="a100-80gb", gpu_count=8, running_job_id="big")],
        pending=[executor_pb2.PendingJob(job_id="next", queue="tunefleet.a100-80gb.high", position=1, team="nlp",
                                         reason="waiting for job big to checkpoint and yield its host",
                                         expected_start=_in(600), expected_start_earliest=_in(300),
                                         expected_start_latest=_in(1200)),
                 executor_pb2.PendingJob(job_id="retrying", queue="tunefleet.a100-80gb.normal", position=0,
                                         reason="retry 1 of 3 after host gpu-2 stopped renewing its lease")],
        policy=executor_pb2.FleetPolicy(preemption=True, retry_limit=3, retry_backoff_s=10, preempt_min_runtime_s=600),
        teams=[executor_pb2.TeamStanding(team="nlp", gpu_class="a100-80gb", held_gpus=8, quota_gpus=4, limit_gpus=-1,
                                         weight=2, usage_gpu_hours=1234.5)]))
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.split()}
    assert rows["nlp"] == ["nlp", "a100-80gb", "8", "4", "none", "2", "1,234.50"], "the team's standing on the class"
    assert rows["next"][1:4] == ["nlp", "tunefleet.a100-80gb.high", "1"] and "yield" in " ".join(rows["next"])
    assert "in 10 min (5 min - 20 min)" in " ".join(rows["next"])
    assert rows["retrying"][3] == "-", "a job in its retry backoff has no place in a queue yet"
    assert rows["retrying"][4] == "-", "nor an expected start"
    assert "policy: preemption on (none that has run under 600 s); a lost host's job is retried up to 3 time(s), " \
           "first after 10 s" in text


def test_feedback_sets_a_multi_node_step_time_against_the_planned_step_and_its_communication() -> None:
    text = feedback_text([executor_pb2.Job(job_id="gang", feedback=progress_pb2.Feedback(
        predicted_step_time_s=2.0, measured_step_time_s=2.5, predicted_communication_time_s=0.75, nodes=2,
        world_size=16, measured_tokens_per_s=1000))])
    header, _, row = text.splitlines()[:3]
    cells = dict(zip([h.strip() for h in header.split("  ") if h.strip()],
                     [c.strip() for c in row.split("  ") if c.strip()], strict=False))
    assert cells["of it comm s"] == "0.750" and cells["ranks on nodes"] == "16 on 2"
    assert "+25.0%" in row, "measured step time against the prediction"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_watch_on_a_terminal_shows_the_checkpoint_written_apart_from_the_one_sealed_in_the_store() -> None:
    stored = "s3://b/fleet/jobs/j/checkpoints/step-00000020/f1"
    events = [progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_TRAINING, step=25, total_steps=40, loss=2.5),
              progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_TRAINING, step=26, message="checkpoint step 20 "
                                         f"stored and sealed in {stored} (1.0 MiB in 0.2 s)",
                                         stored_checkpoint=progress_pb2.StoredCheckpoint(step=20, uri=stored)),
              progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_CHECKPOINTING, step=30, checkpoint_path="/o/c/30"),
              progress_pb2.ProgressEvent(phase=progress_pb2.PHASE_TRAINING, step=31, message="storing checkpoint "
                                         "step 30 failed (EndpointConnectionError: …); retrying in 1 s")]
    out = _Terminal()
    follow(iter(executor_pb2.WatchResponse(event=e) for e in events), out=out)
    text = out.getvalue()
    assert "ckpt @ 30" in text and "stored @ 20" in text, text
    assert "storing checkpoint step 30 failed" in text, "an upload's trouble is printed above the bar"

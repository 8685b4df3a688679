"""What `tunefleet fleet` prints: each pending job's place in line and reason, and the fleet's policy."""

from __future__ import annotations

from tunefleet.v1 import executor_pb2

from clients.fleet_render import fleet_text


def test_the_fleet_table_shows_places_reasons_and_the_policy() -> None:
    text = fleet_text(executor_pb2.FleetResponse(
        hosts=[executor_pb2.Host(host_id="gpu-1", gpu_class="a100-80gb", gpu_count=8, running_job_id="big")],
        pending=[executor_pb2.PendingJob(job_id="next", queue="tunefleet.a100-80gb.high", position=1,
                                         reason="waiting for job big to checkpoint and yield its host"),
                 executor_pb2.PendingJob(job_id="retrying", queue="tunefleet.a100-80gb.normal", position=0,
                                         reason="retry 1 of 3 after host gpu-2 stopped renewing its lease")],
        policy=executor_pb2.FleetPolicy(preemption=True, retry_limit=3, retry_backoff_s=10)))
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.split()}
    assert rows["next"][2] == "1" and "yield" in " ".join(rows["next"])
    assert rows["retrying"][2] == "-", "a job in its retry backoff has no place in a queue yet"
    assert "policy: preemption on; a lost host's job is retried up to 3 time(s), first after 10 s" in text

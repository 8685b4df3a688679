"""Issue 24, "what would run now": a queued job is told which GPU classes with an idle host would start it at once
(the planner's answer on each, at the fleet's prices), and `move` re-plans it for one and queues it there. A real
executor service over a real redis-server; the hosts are registered through fleet.hosts as workers register
theirs (no worker runs: the job stays queued, which is the case this is for)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tunefleet.v1 import model_pb2, plan_pb2, planner_pb2, progress_pb2, training_pb2

from clients.errors import InvalidArgument
from clients.executor_client import ExecutorClient
from common.units import GiB
from fleet.connection import connect
from fleet.hosts import HostGpus, HostRegistry
from planner.catalog import default_catalog
from planner.service import Planner

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _a100_plan(data: Path) -> plan_pb2.Plan:
    """What 'tunefleet recommend --allow-gpu a100-80gb --save-plan' writes: Llama-3.1-8B QLoRA on an A100."""
    answer = Planner(default_catalog()).recommend(planner_pb2.RecommendRequest(
        model=model_pb2.ModelRef(catalog_name="meta-llama/Llama-3.1-8B"),
        training=training_pb2.TrainingSpec(method=training_pb2.METHOD_QLORA),
        workload=training_pb2.WorkloadSpec(dataset_tokens=2_000_000),
        constraints=planner_pb2.Constraints(allowed_gpus=["a100-80gb"], max_gpus=1),
        dataset=plan_pb2.DatasetRef(local_path=str(data)), limit=1))
    plan = answer.plan
    plan.plan_id, plan.output_uri = "llama-qlora", "llama-qlora"
    return plan


def test_a_queued_job_hears_what_would_start_it_now_and_moves_there(start_service, redis_url, counting_data,
                                                                    tmp_path):
    service = start_service()
    registry = HostRegistry(connect(redis_url))
    registry.heartbeat("l4-host", HostGpus("l4-24gb", 1, 22 * GiB), "", [], tmp_path, work_dir_shared=True)
    registry.heartbeat("busy-4090", HostGpus("rtx-4090-24gb", 1, 24 * GiB), "other-job", [], tmp_path, True)
    with ExecutorClient(service.address, timeout_s=30) as client:
        queued = client.submit(_a100_plan(counting_data)).job
        assert queued.queue == "tunefleet.a100-80gb.normal"
        job = client.get("llama-qlora")
        assert [a.gpu_class for a in job.runs_now_instead] == ["l4-24gb"], "only the idle class, not the busy one"
        l4 = job.runs_now_instead[0]
        assert l4.gpus_per_node == 1 and l4.duration_s > job.plan.prediction.estimate.duration_s > 0
        assert l4.cost_usd > 0, "priced at the catalog's L4 price"

        shown = subprocess.run([sys.executable, "-m", "launch", "move", "llama-qlora", "--executor",
                                service.address], capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert "waiting for a100-80gb: starts -" in shown.stdout, "no a100 host: no start to promise"
        assert "starts now on 1x l4-24gb" in shown.stdout and "--gpu-class l4-24gb" in shown.stdout

        with pytest.raises(InvalidArgument) as nowhere:
            client.move("llama-qlora", "h100-sxm-80gb")
        assert nowhere.value.violations[0].field == "gpu_class" and "has no healthy host" in str(nowhere.value)

        moved = client.move("llama-qlora", "l4-24gb")
        assert moved.queue == "tunefleet.l4-24gb.normal" and moved.phase == progress_pb2.PHASE_QUEUED
        assert moved.plan.hardware.gpu == "l4-24gb" and moved.plan.dataset.local_path == str(counting_data)
        assert moved.plan.prediction.fit.per_gpu.total_bytes <= 23034 * 2**20, "planned to fit the L4"
        assert moved.last_event.message.startswith("moved to tunefleet.l4-24gb.normal by anonymous: 1x l4-24gb")
        assert [p.job_id for p in client.fleet("l4-24gb").pending] == ["llama-qlora"]
        assert client.fleet("a100-80gb").pending == []
        assert any(e.action == "move" and e.target == "llama-qlora" for e in client.audit())

"""Issue 58 items 4 and 9: under `tunefleet worker --team-roots`, a team's job reads only its team's data
(<data-root>/teams/<team>) and writes only under its team's outputs (<output-root>/teams/<team>, a relative output
in <work-dir>/teams/<team>): it neither trains on another team's private JSONL nor reads or squats its outputs. A
real executor service, a real worker, real training on the CPU."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tunefleet.v1 import progress_pb2

from clients.executor_client import ExecutorClient
from common.identity import Identities
from tests.integration.fleet_helpers import events_at_end, fleet_plan, identities

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _auth(tmp_path: Path) -> Identities:
    return identities(tmp_path / "auth.toml", [("vic", "vision", "submitter"), ("nora", "nlp", "submitter")])


def test_a_team_reads_and_writes_only_its_own_part_of_the_roots(start_service, start_worker, tiny_model,
                                                                 counting_data, tmp_path):
    data_root, shared = tmp_path / "data-root", tmp_path / "shared"
    shared.mkdir()
    vision_data = data_root / "teams" / "vision"
    shutil.copytree(tiny_model, vision_data / "model")
    shutil.copy(counting_data, vision_data / "private.jsonl")
    shutil.copytree(tiny_model, data_root / "teams" / "nlp" / "model")
    service = start_service(identities=_auth(tmp_path))
    start_worker("host-a", shared_dir=shared, extra=("--team-roots", "--data-root", str(data_root),
                                                     "--output-root", str(shared)))
    with ExecutorClient(service.address, token="vic-token", timeout_s=30) as vic, \
            ExecutorClient(service.address, token="nora-token", timeout_s=30) as nora:
        vic.submit(fleet_plan(vision_data / "model", vision_data / "private.jsonl", "vis-1", max_steps=2))
        assert events_at_end(vic, "vis-1")[-1].phase == progress_pb2.PHASE_DONE
        assert vic.get("vis-1").output_uri == str(shared / "teams" / "vision" / "vis-1")
        assert (shared / "teams" / "vision" / "vis-1" / "progress.jsonl").is_file()

        nlp_model = data_root / "teams" / "nlp" / "model"
        nora.submit(fleet_plan(nlp_model, vision_data / "private.jsonl", "steal-data", max_steps=2))
        end = events_at_end(nora, "steal-data")[-1]
        assert end.phase == progress_pb2.PHASE_FAILED and "outside this host's data roots" in end.message, \
            end.message
        nora.submit(fleet_plan(nlp_model, shared / "teams" / "vision" / "vis-1" / "progress.jsonl", "peek",
                               max_steps=2))
        assert events_at_end(nora, "peek")[-1].phase == progress_pb2.PHASE_FAILED, "another team's outputs are not data"
        squat = fleet_plan(nlp_model, vision_data / "private.jsonl", "squat")
        squat.output_uri = str(shared / "teams" / "vision" / "mine")
        nora.submit(squat)
        end = events_at_end(nora, "squat")[-1]
        assert end.phase == progress_pb2.PHASE_FAILED and "outside this host's output roots" in end.message, \
            end.message
        assert not (shared / "teams" / "vision" / "mine").exists()

"""Where a held job reads and writes on this host: the worker's roots and work dir, or, under --team-roots, its
team's own part of them (<root>/teams/<team>), so that no team's job reads another team's data or outputs, or claims
a folder under another team's. A worker holds one job at a time; its runtime asks for the job's place when it takes
the job (or joins its gang). With a checkpoint store (--checkpoint-store), the job's own prefix of it too:
<store>/jobs/<job id>, under --team-roots <store>/teams/<team>/jobs/<job id>."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tunefleet.v1 import plan_pb2

from common.identity import NAME
from contract.errors import PlanError
from contract.ownership import claim_output, read_paths
from contract.paths import TEAMS_DIR, Roots
from contract.run_config import DEFAULT_OUTPUT_PARENT, output_store, run_config_from_plan
from contract.store import job_prefix
from fleet.record import JobRecord


@dataclass(frozen=True)
class Place:
    roots: Roots
    work_dir: Path  # where a relative output (and a relative dataset path) lands
    store: str = ""  # the job's prefix of the worker's checkpoint store; "" for none

    @classmethod
    def of(cls, roots: Roots, work_dir: Path, team_roots: bool, job: JobRecord, store: str = "") -> Place:
        """The place of a job on a worker with these roots, work dir and checkpoint store."""
        team, job_id = job.team, job.job_id
        if not team_roots:
            return cls(roots, work_dir, job_prefix(store, job_id) if store else "")
        if not NAME.fullmatch(team):  # as common.identity admits a team: never a '/', nor '.' or '..'
            raise PlanError("team", f"{team!r} cannot name a folder; this worker (--team-roots) runs only jobs of "
                                    "teams from the fleet's identities file")
        return cls(roots.of_team(team), work_dir / TEAMS_DIR / team, job_prefix(store, job_id, team) if store else "")

    def output_dir(self, plan: plan_pb2.Plan, job_id: str, forbidden: tuple[Path, ...]) -> Path:
        """Where the job writes, claimed for it before anything is written (contract.ownership): under the work dir
        when relative, inside the output roots, apart from its model and data, from every other job's output and from
        `forbidden` (the worker's own dirs); PlanError naming the field when not."""
        store = output_store(plan)
        if store:  # object storage: checkpoints and the export go there, the rest stays here
            self.roots.writable_uri("output_uri", store)
        path = Path(("" if store else plan.output_uri.removeprefix("file://")) or job_id)
        out = self.roots.writable("output_uri", path if path.is_absolute() else self.work_dir / path)
        cfg = run_config_from_plan(plan, output_dir=str(out))
        return claim_output(out, job_id, (*forbidden, self.work_dir, self.work_dir / DEFAULT_OUTPUT_PARENT,
                                          *self.roots.output), read_paths(cfg, self.work_dir))

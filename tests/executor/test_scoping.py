"""Issue 58 item 8: job ids scoped per team (executor.service.scoping): a member names and sees its team's jobs by
their plan ids, two teams' ids never meet in the fleet, an admin sees other teams' jobs by their fleet ids, and a
fleet without identities keeps its ids as they were."""

from __future__ import annotations

import pytest

from common.identity import UNAUTHENTICATED_ADMIN, Identity, Role
from contract.errors import PlanError
from executor.service import scoping

NORA = Identity("nora", "nlp", Role.SUBMITTER)
VIC = Identity("vic", "vision", Role.SUBMITTER)
ROOT = Identity("root", "ops", Role.ADMIN)


def test_two_teams_ids_never_meet_and_each_sees_its_own_by_plan_id() -> None:
    nlp, vision = scoping.fleet_id("exp-1", "nlp"), scoping.fleet_id("exp-1", "vision")
    assert nlp != vision and nlp.startswith("exp-1-t") and len(nlp) == len("exp-1") + 8
    assert scoping.asked("exp-1", NORA) == [nlp] and scoping.asked("exp-1", VIC) == [vision]
    assert (scoping.shown(nlp, NORA), scoping.shown(vision, VIC)) == ("exp-1", "exp-1")
    assert scoping.asked(vision, NORA) == [scoping.fleet_id(vision, "nlp")], "a member cannot reach another team's id"


def test_an_admin_names_its_own_teams_jobs_by_plan_id_and_others_by_fleet_id() -> None:
    nlp = scoping.fleet_id("exp-1", "nlp")
    assert scoping.shown(nlp, ROOT) == nlp
    assert scoping.asked(nlp, ROOT)[-1] == nlp and scoping.asked("ops-1", ROOT)[0] == scoping.fleet_id("ops-1", "ops")
    assert scoping.shown(scoping.fleet_id("ops-1", "ops"), ROOT) == "ops-1"


def test_a_fleet_without_identities_keeps_its_ids_and_a_long_plan_id_is_refused_with_room_named() -> None:
    assert scoping.fleet_id("exp-1", UNAUTHENTICATED_ADMIN.team) == "exp-1"
    assert scoping.asked("exp-1", UNAUTHENTICATED_ADMIN) == ["exp-1"]
    with pytest.raises(PlanError) as long:
        scoping.fleet_id("x" * 125, "nlp")
    assert long.value.field == "plan.plan_id" and "at most 120" in str(long.value)


def test_the_fleets_own_messages_name_a_job_as_its_reader_names_it() -> None:
    from fleet.jobs import job_label

    exp_2 = scoping.fleet_id("exp-2", "nlp")
    assert job_label(exp_2, "nlp", "nlp") == "job exp-2", "a preempted job of nlp hears its teammate's plan id"
    assert job_label(exp_2, "nlp", "vision") == "a job of team nlp"
    assert job_label(exp_2, "nlp", None) == f"job {exp_2}", "an admin reads the fleet id"

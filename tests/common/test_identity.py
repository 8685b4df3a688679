"""The identities file (common.identity): what it accepts, what it refuses naming the entry and field, and that a
broken edit never locks callers out."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.errors import DeniedError
from common.identity import (
    Identities,
    IdentitiesError,
    Identity,
    Role,
    parse_directory,
    parse_identities,
    token_sha256,
)

GOOD = f'[[identity]]\nprincipal = "alice"\nteam = "vision"\nrole = "submitter"\ntoken_sha256 = "{"a" * 64}"\n'


@pytest.mark.parametrize(("text", "words"), [
    ("", "lists no [[identity]] tables"),
    ("[[identity\n", "is not TOML"),
    (GOOD.replace('"submitter"', '"owner"'), "identity 1 (alice): role must be viewer, submitter or admin"),
    (GOOD.replace("a" * 64, "a" * 63), "identity 1 (alice): token_sha256 must be 64 hex digits"),
    (GOOD.replace('team = "vision"', 'team = "vision team"'), "identity 1: team must be 1-64 letters"),
    (GOOD + 'token = "plain"\n', "unknown keys ['token']"),
    (GOOD.replace("a" * 64, token_sha256("")), "the hash of an empty token"),
    (GOOD + GOOD.replace("a" * 64, "b" * 64), "identity 2: principal alice is listed twice"),
    (GOOD + GOOD.replace('"alice"', '"bob"'), "identity 2 (bob): the same token as alice"),
    (GOOD + '[[team]]\nname = "vision"\nstore = "s3://key:secret@bucket/vision"\n', "store must be an object-store "
                                                                                    "prefix"),
    (GOOD + '[[team]]\nname = "vision"\nstore = "/mnt/vision"\n', "store must be an object-store prefix"),
])
def test_a_file_that_cannot_be_used_is_refused_naming_the_entry_and_the_field(text: str, words: str) -> None:
    with pytest.raises(IdentitiesError) as e:
        parse_identities(text, "ids.toml")
    assert words in str(e.value)


@pytest.mark.parametrize("weight", ["0", "-1", '"2"', "true", "1001"])
def test_a_team_weight_must_be_a_positive_number_within_bounds(weight: str) -> None:
    with pytest.raises(IdentitiesError) as e:
        parse_directory(GOOD + f'[[team]]\nname = "vision"\nweight = {weight}\n', "ids.toml")
    assert "team 1 (vision): weight must be a number above 0 and at most 1000" in str(e.value)


@pytest.mark.parametrize(("table", "words"), [
    ('quota_gpus = 8', "quota_gpus must be a table of GPU class = GPUs"),
    ('quota_gpus = { "a100-80gb" = 2.5 }', "quota_gpus.a100-80gb must be a whole number of GPUs from 0 to 100,000"),
    ('borrow_gpus = { "a100-80gb" = -1 }', "borrow_gpus.a100-80gb must be a whole number of GPUs"),
])
def test_quotas_and_borrowing_limits_are_whole_gpus_per_class(table: str, words: str) -> None:
    with pytest.raises(IdentitiesError) as e:
        parse_directory(GOOD + f'[[team]]\nname = "vision"\n{table}\n', "ids.toml")
    assert f"team 1 (vision): {words}" in str(e.value)
    team = parse_directory(GOOD + '[[team]]\nname = "vision"\nquota_gpus = { "a100-80gb" = 8 }\n'
                           'borrow_gpus = { "a100-80gb" = 4 }\n', "ids.toml").teams["vision"]
    assert (team.quota_gpus, team.borrow_gpus) == ({"a100-80gb": 8}, {"a100-80gb": 4})


def test_a_team_weight_defaults_to_one() -> None:
    teams = parse_directory(GOOD + '[[team]]\nname = "vision"\nweight = 2.5\n\n[[team]]\nname = "speech"\n',
                            "ids.toml").teams
    assert (teams["vision"].weight, teams["speech"].weight) == (2.5, 1.0)


def test_roles_nest_and_a_team_sees_only_its_jobs() -> None:
    viewer, admin = Identity("vic", "vision", Role.VIEWER), Identity("root", "ops", Role.ADMIN)
    viewer.require(Role.VIEWER, "Get")
    with pytest.raises(DeniedError) as e:
        viewer.require(Role.SUBMITTER, "Submit")
    assert str(e.value).startswith("Submit needs the submitter role; vic (team vision) is a viewer")
    admin.require(Role.SUBMITTER, "Submit")
    assert viewer.sees("vision") and not viewer.sees("speech") and admin.sees("speech")


def test_a_broken_edit_keeps_the_last_good_identities_and_a_fixed_one_is_taken(tmp_path: Path) -> None:
    path = tmp_path / "ids.toml"
    path.write_text(GOOD.replace("a" * 64, token_sha256("alice-token")))
    identities = Identities.from_file(path, reload_check_s=0)
    assert identities.lookup("alice-token") == Identity("alice", "vision", Role.SUBMITTER)
    path.write_text("[[identity\n")
    assert identities.lookup("alice-token") is not None, "a typo must not lock every caller out"
    path.write_text(GOOD.replace("a" * 64, token_sha256("bob-token")).replace('"alice"', '"bob"'))
    assert identities.lookup("alice-token") is None and identities.lookup("bob-token").principal == "bob"
    assert Identities.single_admin("t").lookup("t").role is Role.ADMIN

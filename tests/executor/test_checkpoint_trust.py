"""Issue 9, item 10: a checkpoint is loaded only as its run wrote it. The manifest records every file's SHA-256
and an HMAC of the list under the host's checkpoint key; anything else is refused before DeepSpeed unpickles it."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import torch

from contract.errors import PlanError
from executor.training import checkpoint

KEY = b"k" * 64


def _sealed(tmp_path: Path) -> Path:
    d = tmp_path / "checkpoints" / "step-00000010"
    (d / "deepspeed").mkdir(parents=True)
    (d / "deepspeed" / "mp_rank_00_model_states.pt").write_bytes(os.urandom(4096))
    (d / checkpoint.rng_file(0)).write_bytes(os.urandom(64))
    (d / checkpoint.TRAINER_STATE).write_text(json.dumps({"plan_id": "p", "step": 10, "next_micro_batch": 10,
                                                          "world_size": 1}))
    checkpoint.write_manifest(d, KEY)
    return d


def test_a_sealed_checkpoint_verifies_and_is_found(tmp_path: Path) -> None:
    d = _sealed(tmp_path)
    assert checkpoint.verify(d, KEY) == ""
    found = checkpoint.latest(d.parent)
    assert found is not None and found[0].step == 10 and found[1] == d


def test_a_hand_made_checkpoint_with_a_sizes_only_manifest_is_refused(tmp_path: Path) -> None:
    d = _sealed(tmp_path)
    files = {n: e["bytes"] for n, e in json.loads((d / checkpoint.MANIFEST).read_text())["files"].items()}
    (d / checkpoint.MANIFEST).write_text(json.dumps({"files": files}))  # the old, unsigned format
    assert "no readable manifest" in checkpoint.verify(d, KEY)


def test_a_same_size_edit_is_refused(tmp_path: Path) -> None:
    d = _sealed(tmp_path)
    victim = d / "deepspeed" / "mp_rank_00_model_states.pt"
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(bytes(data))
    assert checkpoint.is_complete(d)  # sizes still agree: listing alone would trust it
    assert "does not match the hash" in checkpoint.verify(d, KEY)


def test_a_rewritten_manifest_without_the_key_is_refused(tmp_path: Path) -> None:
    d = _sealed(tmp_path)
    (d / "deepspeed" / "payload.pkl").write_bytes(b"cos\nsystem\n(S'true'\ntR.")
    checkpoint.write_manifest(d, b"an attacker's guess")
    assert "not signed with this host's checkpoint key" in checkpoint.verify(d, KEY)


def test_an_added_file_is_refused(tmp_path: Path) -> None:
    d = _sealed(tmp_path)
    (d / "deepspeed" / "extra.pt").write_bytes(b"x")
    assert "differ from the manifest" in checkpoint.verify(d, KEY)


def test_the_signing_key_comes_from_the_environment_or_a_private_key_file(tmp_path: Path) -> None:
    assert checkpoint.signing_key({checkpoint.KEY_ENV: "abc"}, tmp_path / "unused") == b"abc"
    (tmp_path / "secret").write_text("from-a-file\n")
    assert checkpoint.signing_key({checkpoint.KEY_FILE_ENV: str(tmp_path / "secret")}) == b"from-a-file"
    path = tmp_path / "state" / "checkpoint.key"
    first = checkpoint.signing_key({}, path)
    assert len(first) == 64 and checkpoint.signing_key({}, path) == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_rng_state_loads_without_unpickling_code(tmp_path: Path) -> None:
    torch.save(torch.get_rng_state(), tmp_path / "rng.pt")
    assert torch.equal(torch.load(tmp_path / "rng.pt", weights_only=True), torch.get_rng_state())

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (print, ("pickled code ran",))
    torch.save(Evil(), tmp_path / "evil.pt")
    with pytest.raises(Exception, match="Weights only load failed"):
        torch.load(tmp_path / "evil.pt", weights_only=True)


@pytest.mark.parametrize("state", [b"{not json", json.dumps({"plan_id": "p", "step": 10, "next_micro_batch": 10,
                                                              "world_size": 1, "extra": 1}).encode(), b"[1]"])
def test_an_unreadable_trainer_state_fails_the_resume_instead_of_restarting(tmp_path: Path, state: bytes) -> None:
    """Issue 23, item 6: such a checkpoint used to be skipped, and the run restarted at step 0 over it."""
    d = _sealed(tmp_path)
    (d / checkpoint.TRAINER_STATE).write_bytes(state)
    checkpoint.write_manifest(d, KEY)  # listed as complete: only its state is wrong
    with pytest.raises(PlanError) as info:
        checkpoint.latest(d.parent)
    assert info.value.field == "output_uri" and checkpoint.TRAINER_STATE in info.value.description

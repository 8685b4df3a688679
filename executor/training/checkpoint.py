"""Atomic, signed checkpoints: written under a temporary name, described by a manifest, then renamed into place.

A directory counts as a checkpoint only if its name is step-NNNNNNNN and its manifest lists files that all
exist with the recorded sizes; anything else (a run killed mid-write, a truncated copy) is ignored.

DeepSpeed loads its checkpoint files with torch.load(weights_only=False), which runs any pickled code. So the
manifest also records each file's SHA-256 and an HMAC-SHA256 of the whole list under this host's checkpoint key
(TUNEFLEET_CHECKPOINT_KEY or the file TUNEFLEET_CHECKPOINT_KEY_FILE names; else a key file made once per user,
0600, at ~/.local/state/tunefleet/checkpoint.key).
Before a run resumes, rank 0 recomputes both; a checkpoint that fails (hand-made, edited, or signed with another
key) is refused with the reason, never loaded. Fleet workers that resume each other's jobs share the key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from contract.errors import PlanError
from contract.store import MANIFEST
from executor.training import adam_replay

TRAINER_STATE = "trainer_state.json"
DEEPSPEED_TAG = "deepspeed"
_STEP_DIR = re.compile(r"^step-(\d{8})$")
_ZERO_SHARD = re.compile(r"zero_pp_rank_(\d+)_")  # DeepSpeed's per-rank files under ZeRO (optimizer, ZeRO-3 weights)
PARTIAL_PREFIX = ".partial-step-"
KEY_ENV = "TUNEFLEET_CHECKPOINT_KEY"
KEY_FILE_ENV = "TUNEFLEET_CHECKPOINT_KEY_FILE"  # a file holding the key (a container secret)
DEFAULT_KEY_PATH = Path("~/.local/state/tunefleet/checkpoint.key")


def signing_key(environ: dict[str, str] | None = None, path: Path = DEFAULT_KEY_PATH) -> bytes:
    """The key checkpoints are signed with: TUNEFLEET_CHECKPOINT_KEY, else the file TUNEFLEET_CHECKPOINT_KEY_FILE
    names, else this user's key file (created on first use)."""
    env = os.environ if environ is None else environ
    if env.get(KEY_ENV):
        return env[KEY_ENV].encode()
    if env.get(KEY_FILE_ENV):
        return Path(env[KEY_FILE_ENV]).read_bytes().strip()
    path = path.expanduser()
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another rank made it first
        return path.read_bytes().strip()
    key = secrets.token_hex(32).encode()
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


@dataclass(frozen=True)
class TrainerState:
    """Where the run is: optimizer steps done and the next global micro-batch to read."""

    plan_id: str
    step: int
    next_micro_batch: int
    world_size: int
    fence: int = 0  # the fleet claim that wrote it (fleet.leases); 0 outside the fleet


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_manifest(directory: Path, key: bytes) -> None:
    """Seal `directory`: every file's size and SHA-256, and an HMAC of that list under `key`."""
    files = {str(p.relative_to(directory)): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
             for p in sorted(directory.rglob("*")) if p.is_file() and p.name != MANIFEST}
    _write_json(directory / MANIFEST, {"files": files, "hmac_sha256": _signature(files, key)})


def rng_file(rank: int) -> str:
    return f"rng-rank{rank:05d}.pt"


def missing_shards(names: set[str], world_size: int) -> list[int]:
    """The ranks whose files a checkpoint of `world_size` ranks lacks: each rank writes its RNG state, and under
    ZeRO its DeepSpeed shard (on a multi-node run, a node whose shards never reached shared storage)."""
    zero_ranks = {int(m.group(1)) for name in names if (m := _ZERO_SHARD.search(Path(name).name))}
    return [r for r in range(world_size) if rng_file(r) not in names or (zero_ranks and r not in zero_ranks)]


def _signature(files: dict[str, Any], key: bytes) -> str:
    return hmac.new(key, json.dumps(files, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def _recorded(directory: Path) -> dict[str, Any] | None:
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        files = manifest["files"]
        if isinstance(files, dict) and files and all(isinstance(v, dict) and isinstance(v.get("bytes"), int)
                                                     for v in files.values()):
            return manifest  # type: ignore[no-any-return]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def is_complete(directory: Path) -> bool:
    """Every file the manifest lists is there with its size (cheap: for listing and clean-up, not for trust)."""
    manifest = _recorded(directory)
    return manifest is not None and all(
        (directory / name).is_file() and (directory / name).stat().st_size == entry["bytes"]
        for name, entry in manifest["files"].items())


def verify(directory: Path, key: bytes) -> str:
    """Why this checkpoint must not be loaded ("" when its signature and every file's hash hold)."""
    manifest = _recorded(directory)
    if manifest is None:
        return "it has no readable manifest"
    files = manifest["files"]
    if not hmac.compare_digest(str(manifest.get("hmac_sha256", "")), _signature(files, key)):
        return "its manifest is not signed with this host's checkpoint key"
    on_disk = {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST}
    if on_disk != set(files):
        return f"its files differ from the manifest's ({len(on_disk ^ set(files))} unlisted or missing)"
    for name, entry in files.items():
        if _sha256(directory / name) != entry.get("sha256"):
            return f"{name} does not match the hash its manifest records"
    try:
        world_size = int(json.loads((directory / TRAINER_STATE).read_text())["world_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"its {TRAINER_STATE} is missing or unreadable"
    missing = missing_shards(set(files), world_size)
    if missing:
        return f"it lacks the shards of rank(s) {', '.join(map(str, missing[:8]))} of its {world_size}"
    return ""


def complete_checkpoints(root: Path) -> list[tuple[int, Path]]:
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()]
    return sorted((step, p) for step, p in found if is_complete(p))


def latest(root: Path) -> tuple[TrainerState, Path] | None:
    checkpoints = complete_checkpoints(root)
    if not checkpoints:
        return None
    _, path = checkpoints[-1]
    try:
        fields = json.loads((path / TRAINER_STATE).read_text())
        return TrainerState(**fields), path
    except (OSError, ValueError, TypeError) as e:
        # the newest checkpoint is listed as complete: skipping it would restart the run and overwrite the evidence
        raise PlanError("output_uri", f"{path} was not loaded: its {TRAINER_STATE} is not one this executor "
                                      f"writes ({type(e).__name__}: {str(e)[:200]}). A checkpoint is trusted only "
                                      "as its run wrote it; move it away to start over") from e


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_json(path: Path, value: Any) -> None:
    with path.open("w") as f:
        json.dump(value, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())


def rank0_decides(value: bool, device: Any) -> bool:
    """Rank 0's value on every rank (a broadcast), for decisions all ranks must act on together."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return value
    flag = torch.tensor([int(value)], device=device)
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def save(engine: Any, root: Path, state: TrainerState, rank: int, keep: int, frozen_excluded: bool,
         may_seal: Callable[[], bool] = lambda: True) -> Path | None:
    """Every rank writes its shard into a temporary directory of this run's own; rank 0 seals it with a manifest
    and renames it into place, if may_seal() says this run still owns the job (a fleet run confirms its lease:
    False leaves the checkpoint unsealed, LeaseLostError stops the run). Returns the checkpoint, or None when
    it was not sealed."""
    final = step_dir(root, state.step)
    # A run's own name, so that a stale run of the same plan (a host that lost its lease) never writes into it.
    partial = root / f"{PARTIAL_PREFIX}{state.step:08d}.{os.environ.get('TORCHELASTIC_RUN_ID', 'local')}"
    if rank == 0:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    _barrier()
    engine.save_checkpoint(str(partial), tag=DEEPSPEED_TAG, exclude_frozen_parameters=frozen_excluded)
    torch.save(torch.get_rng_state(), partial / rng_file(rank))
    _barrier()
    sealed = True
    if rank == 0:
        missing = missing_shards({str(p.relative_to(partial)) for p in partial.rglob("*") if p.is_file()},
                                 state.world_size)
        if missing:
            raise PlanError("output_uri", f"the checkpoint shards of rank(s) {', '.join(map(str, missing[:8]))} "
                                          f"are not in {partial} as node 0 sees it: a multi-node run writes to "
                                          "storage every node mounts at the same path (start the workers with "
                                          "--work-dir-shared on it)")
        _write_json(partial / TRAINER_STATE, asdict(state))
        write_manifest(partial, signing_key())
        if may_seal():
            shutil.rmtree(final, ignore_errors=True)
            os.rename(partial, final)
            _fsync_dir(root)
            for _, old in complete_checkpoints(root)[:-keep]:
                shutil.rmtree(old, ignore_errors=True)
            for leftover in root.glob(f"{PARTIAL_PREFIX}*"):  # runs killed mid-write
                if int(leftover.name.removeprefix(PARTIAL_PREFIX)[:8]) <= state.step:
                    shutil.rmtree(leftover, ignore_errors=True)
        else:
            sealed = False
    return final if rank0_decides(sealed, engine.device) else None


def load(engine: Any, path: Path, rank: int, frozen_excluded: bool) -> None:
    """The engine, optimizer, scheduler and RNG state of a checkpoint, restored so that the run goes on bit for bit
    as if it had never stopped."""
    engine.load_checkpoint(str(path), tag=DEEPSPEED_TAG, load_module_strict=not frozen_excluded)
    adam_replay.replay_bias_corrections(engine)
    rng = path / rng_file(rank)
    if rng.is_file():
        torch.set_rng_state(torch.load(rng, weights_only=True))

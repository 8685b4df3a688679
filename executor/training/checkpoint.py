"""Atomic checkpoints: written under a temporary name, described by a manifest, then renamed into place.

A directory counts as a checkpoint only if its name is step-NNNNNNNN and its manifest lists files that all
exist with the recorded sizes; anything else (a run killed mid-write, a truncated copy) is ignored.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

MANIFEST = "manifest.json"
TRAINER_STATE = "trainer_state.json"
DEEPSPEED_TAG = "deepspeed"
_STEP_DIR = re.compile(r"^step-(\d{8})$")
PARTIAL_PREFIX = ".partial-step-"


@dataclass(frozen=True)
class TrainerState:
    """Where the run is: optimizer steps done and the next global micro-batch to read."""

    plan_id: str
    step: int
    next_micro_batch: int
    world_size: int
    fence: int = 0  # the fleet claim that wrote it (executor.lease); 0 outside the fleet


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def _manifest(directory: Path) -> dict[str, int]:
    return {str(p.relative_to(directory)): p.stat().st_size
            for p in sorted(directory.rglob("*")) if p.is_file() and p.name != MANIFEST}


def is_complete(directory: Path) -> bool:
    try:
        recorded = json.loads((directory / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return bool(recorded) and all((directory / name).is_file() and (directory / name).stat().st_size == size
                                  for name, size in recorded.items())


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
    return TrainerState(**json.loads((path / TRAINER_STATE).read_text())), path


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
    torch.save(torch.get_rng_state(), partial / f"rng-rank{rank:05d}.pt")
    _barrier()
    sealed = True
    if rank == 0:
        _write_json(partial / TRAINER_STATE, asdict(state))
        _write_json(partial / MANIFEST, {"files": _manifest(partial)})
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
    engine.load_checkpoint(str(path), tag=DEEPSPEED_TAG, load_module_strict=not frozen_excluded)
    rng = path / f"rng-rank{rank:05d}.pt"
    if rng.is_file():
        torch.set_rng_state(torch.load(rng))

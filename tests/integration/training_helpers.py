"""Helpers shared by the training tests: the logits of a model, and waiting for a phase of a running plan."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import torch
from safetensors.torch import load_file
from tunefleet.v1 import progress_pb2

from contract.progress import read_events

_KILL_DEADLINE_S = 300.0
_PROGRESS_POLL_S = 0.02


def logits(model: torch.nn.Module, ids: torch.Tensor, **inputs: torch.Tensor) -> torch.Tensor:
    """The model's logits for ids (and any other inputs: pixel values, image grids), in eval mode."""
    model.eval()
    with torch.no_grad():
        return model(input_ids=ids, **inputs).logits  # type: ignore[no-any-return]


def wait_for_phase(path: Path, phase: int, proc: subprocess.Popen[bytes]) -> progress_pb2.ProgressEvent:
    deadline = time.monotonic() + _KILL_DEADLINE_S
    while time.monotonic() < deadline:
        for event in read_events(path):
            if event.phase == phase:
                return event
        try:  # wait on the run itself between looks at the progress file
            proc.wait(timeout=_PROGRESS_POLL_S)
        except subprocess.TimeoutExpired:
            continue
        raise AssertionError(f"training exited with {proc.returncode} before phase {phase}")
    raise AssertionError(f"no phase {phase} within {_KILL_DEADLINE_S} s")


def exported(out: Path) -> dict[str, torch.Tensor]:
    """Every tensor a run saved in <out>/final (save_pretrained's safetensors files)."""
    tensors: dict[str, torch.Tensor] = {}
    for path in sorted((out / "final").glob("*.safetensors")):
        tensors.update(load_file(path))
    assert tensors, f"nothing exported in {out / 'final'}"
    return tensors

"""What a training process sets up for itself before it imports the training stack: `prepare`, called first by each
entry point (the launcher: executor.training.__main__ and `tunefleet train`; each rank: executor.training.rank), and
by the test suite and benchmarks that run the stack in their own process. Never at import.

DeepSpeed compiles its CPU ops into TORCH_EXTENSIONS_DIR, by default ~/.cache/torch_extensions, which every
virtualenv on the machine shares; the build files record the venv's path, so two checkouts rebuild each
other's ops and every run pays 1.5-3 min of compiling. Each environment gets its own directory instead,
where `make install` builds the ops once.

One ninja builds and checks them: the environment's own (pip's, beside DeepSpeed), first on PATH. Two ninjas
of different log versions (a system 1.11 and pip's 1.13) discard each other's .ninja_log, so each would find
the ops out of date and rebuild them (127 s + 200 s) on the next job.

bitsandbytes is loaded only by a run that quantises. PEFT and transformers import it whenever it is installed, and
its import compiles kernels with torch.compile (3 s a process here); the launcher tells a rank whose plan does not
quantise (WITHOUT_BITSANDBYTES_ENV), and the rank hides the package before either is imported (a None entry in
sys.modules: importlib.util.find_spec, which both ask, then finds nothing).

DeepSpeed's Muon optimizer is never loaded: tunefleet's ranks build AdamW. DeepSpeed (0.19) imports its two Muon
modules wherever it asks whether an optimizer or a parameter is Muon's (deepspeed.initialize under ZeRO, ZeRO-1/2's
gradient reduction and partition flattening, ZeRO-3's optimizer), and original_muon applies torch.compile at
import, which loads the inductor compiler: about 1.5 s of CPU in every ZeRO rank's start here (a two-rank ZeRO-2
launch: 21.8 -> 18.9 CPU-s). Stand-in modules answer those questions as the real ones do for AdamW (no optimizer
is an instance of their MuonWithAuxAdam), and their muon_update, which DeepSpeed calls only for a Muon optimizer's
parameters, refuses.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

TORCH_EXTENSIONS_DIR = Path(sys.prefix) / "torch_extensions"
ENVIRONMENT_BIN = Path(sys.prefix) / "bin"
WITHOUT_BITSANDBYTES_ENV = "TUNEFLEET_WITHOUT_BITSANDBYTES"
MUON_MODULES = ("deepspeed.runtime.zero.muon.muon_optimizer", "deepspeed.runtime.zero.muon.original_muon")


class _NotMuon:
    """DeepSpeed's MuonWithAuxAdam as seen by a tunefleet rank: no optimizer it builds is one."""


def _no_muon_update(*_args: object, **_kwargs: object) -> None:
    raise RuntimeError("tunefleet's ranks never train with DeepSpeed's Muon optimizer (executor.training.process)")


def prepare() -> None:
    """Set this process up to train (idempotent); the environment variables it sets pass on to its children (the
    ranks a launcher starts)."""
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(TORCH_EXTENSIONS_DIR))
    path = os.environ.get("PATH", "")
    if (ENVIRONMENT_BIN / "ninja").is_file() and not path.startswith(f"{ENVIRONMENT_BIN}{os.pathsep}"):
        os.environ["PATH"] = f"{ENVIRONMENT_BIN}{os.pathsep}{path}"
    if os.environ.get(WITHOUT_BITSANDBYTES_ENV) == "1":
        sys.modules.setdefault("bitsandbytes", None)  # type: ignore[arg-type]
    for name in MUON_MODULES:
        if name not in sys.modules:
            stand_in = types.ModuleType(name, "Stand-in: tunefleet never builds DeepSpeed's Muon optimizer.")
            stand_in.MuonWithAuxAdam = _NotMuon  # type: ignore[attr-defined]
            stand_in.muon_update = _no_muon_update  # type: ignore[attr-defined]
            sys.modules[name] = stand_in

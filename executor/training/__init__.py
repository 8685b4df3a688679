"""Training on one host: the only package that imports torch, DeepSpeed and PEFT.

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
"""

import os
import sys
from pathlib import Path

TORCH_EXTENSIONS_DIR = Path(sys.prefix) / "torch_extensions"
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(TORCH_EXTENSIONS_DIR))
ENVIRONMENT_BIN = Path(sys.prefix) / "bin"
_PATH = os.environ.get("PATH", "")
if (ENVIRONMENT_BIN / "ninja").is_file() and not _PATH.startswith(f"{ENVIRONMENT_BIN}{os.pathsep}"):
    os.environ["PATH"] = f"{ENVIRONMENT_BIN}{os.pathsep}{_PATH}"

WITHOUT_BITSANDBYTES_ENV = "TUNEFLEET_WITHOUT_BITSANDBYTES"
if os.environ.get(WITHOUT_BITSANDBYTES_ENV) == "1":
    sys.modules.setdefault("bitsandbytes", None)  # type: ignore[arg-type]

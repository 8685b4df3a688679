"""Training on one host: the only package that imports torch, DeepSpeed and PEFT.

DeepSpeed compiles its CPU ops into TORCH_EXTENSIONS_DIR, by default ~/.cache/torch_extensions, which every
virtualenv on the machine shares; the build files record the venv's path, so two checkouts rebuild each
other's ops and every run pays 1.5-3 min of compiling. Each environment gets its own directory instead,
where `make install` builds the ops once.
"""

import os
import sys
from pathlib import Path

TORCH_EXTENSIONS_DIR = Path(sys.prefix) / "torch_extensions"
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(TORCH_EXTENSIONS_DIR))

"""Hugging Face Jobs / Spaces hardware flavors named in the reference documents.

Source for every row: huggingface.co/docs/hub/spaces-gpus (hardware table, read 2026-11). The
reference document's "a100-large 40GB" is out of date: the flavor now carries an 80 GB A100.
TPU flavors are listed so the planner can say why it does not plan for them.
"""

from __future__ import annotations

from common.units import GiB
from contract.schema import Flavor

HF = "huggingface"
SRC = "huggingface.co/docs/hub/spaces-gpus (read 2026-11)"

FLAVORS: tuple[Flavor, ...] = (
    Flavor("cpu-basic", HF, "", 0, 16 * GiB, 2, 0.0, SRC, accelerator="cpu"),
    Flavor("cpu-upgrade", HF, "", 0, 32 * GiB, 8, 0.03, SRC, accelerator="cpu"),
    Flavor("t4-small", HF, "t4-16gb", 1, 15 * GiB, 4, 0.40, SRC),
    Flavor("t4-medium", HF, "t4-16gb", 1, 30 * GiB, 8, 0.60, SRC),
    Flavor("l4x1", HF, "l4-24gb", 1, 30 * GiB, 8, 0.80, SRC),
    Flavor("l4x4", HF, "l4-24gb", 4, 186 * GiB, 48, 3.80, SRC),
    Flavor("a10g-small", HF, "a10g-24gb", 1, 15 * GiB, 4, 1.00, SRC),
    Flavor("a10g-large", HF, "a10g-24gb", 1, 46 * GiB, 12, 1.50, SRC),
    Flavor("a10g-largex2", HF, "a10g-24gb", 2, 92 * GiB, 24, 3.00, SRC),
    Flavor("a10g-largex4", HF, "a10g-24gb", 4, 184 * GiB, 48, 5.00, SRC),
    Flavor("a100-large", HF, "a100-80gb", 1, 142 * GiB, 12, 2.50, SRC),
    Flavor("l40sx1", HF, "l40s-48gb", 1, 62 * GiB, 8, 1.80, SRC),
    Flavor("l40sx4", HF, "l40s-48gb", 4, 382 * GiB, 48, 8.30, SRC),
    Flavor("l40sx8", HF, "l40s-48gb", 8, 1534 * GiB, 192, 23.50, SRC),
    Flavor("v5e-1x1", HF, "", 0, 0, 0, 0.0, SRC, accelerator="tpu"),
    Flavor("v5e-2x2", HF, "", 0, 0, 0, 0.0, SRC, accelerator="tpu"),
    Flavor("v5e-2x4", HF, "", 0, 0, 0, 0.0, SRC, accelerator="tpu"),
)

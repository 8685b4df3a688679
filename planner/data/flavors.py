"""Hugging Face Jobs / Spaces hardware flavors named in the reference documents: the data file flavors.csv (one row a
flavor, its source in the row: huggingface.co/docs/hub/spaces-gpus, the hardware table), host memory in GiB, the
hourly price in US dollars. The reference document's "a100-large 40GB" is out of date: the flavor now carries an
80 GB A100. TPU flavors are listed so the planner can say why it does not plan for them. This module reads the file
once; a row that does not parse names its line.
"""

from __future__ import annotations

import csv
from importlib.resources import files

from common.units import GiB
from contract.schema import Flavor

COLUMNS = ("name", "provider", "accelerator", "gpu", "gpu_count", "host_memory_gib", "vcpus", "hourly_usd", "source")
ACCELERATORS = ("gpu", "cpu", "tpu")


def _flavor(row: dict[str, str]) -> Flavor:
    if row["accelerator"] not in ACCELERATORS:
        raise ValueError(f"accelerator must be one of {', '.join(ACCELERATORS)}, not {row['accelerator']!r}")
    return Flavor(row["name"], row["provider"], row["gpu"], int(row["gpu_count"]),
                  int(float(row["host_memory_gib"]) * GiB), int(row["vcpus"]), float(row["hourly_usd"]),
                  row["source"], accelerator=row["accelerator"])


def read_flavors(text: str) -> tuple[Flavor, ...]:
    """The flavors of a flavors.csv (its header must be COLUMNS)."""
    reader = csv.DictReader(text.splitlines())
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise ValueError(f"flavors.csv: the header must be {','.join(COLUMNS)}")
    flavors = []
    for row in reader:
        try:
            flavors.append(_flavor(row))
        except (KeyError, ValueError) as e:
            raise ValueError(f"flavors.csv line {reader.line_num}: {e}") from e
    return tuple(flavors)


FLAVORS: tuple[Flavor, ...] = read_flavors(files("planner.data").joinpath("flavors.csv").read_text())

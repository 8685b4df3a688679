"""GPU classes: vendor data-sheet figures, each with its source.

Memory is the marketed capacity (binary GiB, as DRAM is built). FLOP/s are dense (no 2:4
sparsity) tensor-core peaks; for GeForce cards the fp16/bf16 figure is the one with fp32
accumulate, which is what mixed-precision training uses. Interconnect bandwidth is per GPU
and per direction. Host RAM per GPU is the typical cloud instance's share (source given).
Prices live in prices.csv and are merged in by the catalog.

The figures are a data file, gpus.csv (one row a class, its source in the row), in the units data sheets give
them: memory in GiB, FLOP/s in TFLOP/s, bandwidths in GB/s per direction, aliases separated by spaces. This module
reads it once; a row that does not parse names its line.
"""

from __future__ import annotations

import csv
from importlib.resources import files

from common.units import GB_PER_S, TFLOPS, GiB
from contract.schema import GpuSpec, Interconnect

COLUMNS = ("name", "display_name", "vendor", "architecture", "memory_gib", "bf16_tflops", "fp16_tflops",
           "fp32_tflops", "memory_bandwidth_gb_s", "interconnect", "interconnect_gb_s", "supports_bf16",
           "spec_source", "host_memory_per_gpu_gib", "aliases")


def _gpu(row: dict[str, str]) -> GpuSpec:
    return GpuSpec(
        name=row["name"], display_name=row["display_name"], vendor=row["vendor"], architecture=row["architecture"],
        memory_bytes=int(float(row["memory_gib"]) * GiB), bf16_flops_per_s=float(row["bf16_tflops"]) * TFLOPS,
        fp16_flops_per_s=float(row["fp16_tflops"]) * TFLOPS, fp32_flops_per_s=float(row["fp32_tflops"]) * TFLOPS,
        memory_bandwidth_bytes_per_s=float(row["memory_bandwidth_gb_s"]) * GB_PER_S,
        interconnect=Interconnect(row["interconnect"]),
        interconnect_bandwidth_bytes_per_s=float(row["interconnect_gb_s"]) * GB_PER_S,
        supports_bf16={"yes": True, "no": False}[row["supports_bf16"]], spec_source=row["spec_source"],
        host_memory_per_gpu_bytes=int(float(row["host_memory_per_gpu_gib"]) * GiB),
        aliases=tuple(row["aliases"].split()))


def read_gpus(text: str) -> tuple[GpuSpec, ...]:
    """The classes of a gpus.csv (its header must be COLUMNS)."""
    reader = csv.DictReader(text.splitlines())
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise ValueError(f"gpus.csv: the header must be {','.join(COLUMNS)}")
    gpus = []
    for row in reader:
        try:
            gpus.append(_gpu(row))
        except (KeyError, ValueError) as e:
            raise ValueError(f"gpus.csv line {reader.line_num}: {e}") from e
    return tuple(gpus)


GPUS: tuple[GpuSpec, ...] = read_gpus(files("planner.data").joinpath("gpus.csv").read_text())

"""CPU host classes: hosts that train on their cores (DS_ACCELERATOR=cpu, gloo), as `make run`, the tests and CPU
fleets do. Their figures are measured, not read off a data sheet: `make bench-cpu` (benchmarks/cpu_class.py) on the
machine named, which writes benchmarks/results/cpu_class_figures.csv. A class's "GPU" is one rank; the ranks of a
host share its memory (a fit checks one rank against the whole).

The catalog looks them up by name (`--gpu cpu`) but never offers them: recommendations, suggestions and moves are
among GPUs only (planner.catalog.Catalog.hosts)."""

from __future__ import annotations

from common.units import GB_PER_S, GFLOPS, GiB
from contract.gpu_class import CPU_CLASS
from contract.schema import GpuSpec, Interconnect

# This project's CI machine kind (../.library/env/machines: 2 cores, 24 GiB, x86-64 with AMX, so bf16 matmuls run
# ~4x fp32; fp16 has no fast path: 2.7 GFLOP/s at 512 x 512, 0.3 at 2048 x 2048), measured 2026-11-28 by make
# bench-cpu (benchmarks/results/cpu_class_figures.csv).
REFERENCE_CPU = "make bench-cpu on the CI machine kind (2 cores, 24 GiB), 2026-11-28"
CPU_HOST = GpuSpec(
    name=CPU_CLASS, display_name="CPU host (2 cores, 24 GiB)", vendor="cpu", architecture="cpu",
    memory_bytes=24 * GiB, bf16_flops_per_s=946 * GFLOPS, fp16_flops_per_s=2.7 * GFLOPS,  # fp16: 512 x 512
    fp32_flops_per_s=216 * GFLOPS, memory_bandwidth_bytes_per_s=78 * GB_PER_S,
    interconnect=Interconnect.PCIE, interconnect_bandwidth_bytes_per_s=78 * GB_PER_S / 2,  # gloo over shared memory
    supports_bf16=True, spec_source=REFERENCE_CPU, host_memory_per_gpu_bytes=24 * GiB, aliases=("cpu-host",),
    marketed_memory_bytes=24 * GiB, memory_source=REFERENCE_CPU, cores=2,
    # fitted to the executor's steps, two make bench-cpu runs of 12 (tiny Llama shapes 64x2 to 512x6, LoRA and full,
    # 64 and 256 tokens a step): 1.27 ms a decoder-layer pass + 4.2 ns a trainable parameter + the FLOPs at 74.5 % of
    # the fp32 peak (planner.constants.BASE_MFU_BY_ARCHITECTURE): median error 12 %; a run's start-up, from its
    # launch to its first step, 4.4 s (median of 24)
    host_s_per_layer_pass=1.27e-3, host_s_per_trainable_param=4.2e-9, startup_s=4.4)

CPU_HOSTS = (CPU_HOST,)

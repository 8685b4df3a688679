"""GPU classes: vendor data-sheet figures, each with its source.

Memory is the marketed capacity (binary GiB, as DRAM is built). FLOP/s are dense (no 2:4
sparsity) tensor-core peaks; for GeForce cards the fp16/bf16 figure is the one with fp32
accumulate, which is what mixed-precision training uses. Interconnect bandwidth is per GPU
and per direction. Host RAM per GPU is the typical cloud instance's share (source given).
Prices live in prices.py and are merged in by the catalog.
"""

from __future__ import annotations

from common.units import GiB
from contract.schema import GpuSpec, Interconnect

TFLOPS = 1e12
GB_PER_S = 1e9

ADA_WP = "NVIDIA Ada GPU Architecture whitepaper v2.1 (2023), Appendix A"
AMPERE_WP = "NVIDIA Ampere GA102 GPU Architecture whitepaper v2.0 (2021), Appendix A"
TURING_WP = "NVIDIA Turing GPU Architecture whitepaper (2018), Appendix A, reference clocks"
BLACKWELL_WP = "NVIDIA RTX Blackwell GPU Architecture whitepaper v1.0 (2025), Appendix A"
PCIE4_X16 = 32 * GB_PER_S  # PCIe 4.0 x16: 64 GB/s both directions (PCI-SIG)
PCIE5_X16 = 64 * GB_PER_S  # PCIe 5.0 x16: 128 GB/s both directions (PCI-SIG)
PCIE3_X16 = 16 * GB_PER_S  # PCIe 3.0 x16: 32 GB/s both directions (PCI-SIG)
CONSUMER_HOST_PER_GPU = 64 * GiB  # typical community-cloud pod RAM per consumer GPU (RunPod/Vast listings, 2026)


def _g(name: str, display: str, vendor: str, arch: str, mem_gib: float, bf16_tf: float, fp16_tf: float,
       fp32_tf: float, bw_gb_s: float, link: Interconnect, link_gb_s: float, bf16: bool, source: str,
       host_gib: float, aliases: tuple[str, ...] = ()) -> GpuSpec:
    return GpuSpec(
        name=name, display_name=display, vendor=vendor, architecture=arch,
        memory_bytes=int(mem_gib * GiB), bf16_flops_per_s=bf16_tf * TFLOPS, fp16_flops_per_s=fp16_tf * TFLOPS,
        fp32_flops_per_s=fp32_tf * TFLOPS, memory_bandwidth_bytes_per_s=bw_gb_s * GB_PER_S,
        interconnect=link, interconnect_bandwidth_bytes_per_s=link_gb_s * GB_PER_S, supports_bf16=bf16,
        spec_source=source,
        host_memory_per_gpu_bytes=int(host_gib * GiB), aliases=aliases,
    )


N, P, IF = Interconnect.NVLINK, Interconnect.PCIE, Interconnect.INFINITY_FABRIC
C = CONSUMER_HOST_PER_GPU / GiB

GPUS: tuple[GpuSpec, ...] = (
    # Turing GeForce (no bf16; fp16 tensor with fp32 accumulate)
    _g("rtx-2060-6gb", "GeForce RTX 2060", "nvidia", "turing", 6, 0, 25.8, 6.5, 336, P, 16, False, TURING_WP, C,
       ("rtx-2060", "rtx2060")),
    _g("rtx-2070-8gb", "GeForce RTX 2070", "nvidia", "turing", 8, 0, 29.9, 7.5, 448, P, 16, False, TURING_WP, C,
       ("rtx-2070", "rtx2070")),
    _g("rtx-2080-8gb", "GeForce RTX 2080", "nvidia", "turing", 8, 0, 40.3, 10.1, 448, P, 16, False, TURING_WP, C,
       ("rtx-2080", "rtx2080")),
    _g("rtx-2080-ti-11gb", "GeForce RTX 2080 Ti", "nvidia", "turing", 11, 0, 53.8, 13.4, 616, P, 16, False,
       TURING_WP, C, ("rtx-2080-ti", "rtx2080ti", "2080ti")),
    # Pascal (no tensor cores): GTX 1080 Ti runs fp16 at 1/64 rate; P100 at 2x fp32
    _g("gtx-1080-ti-11gb", "GeForce GTX 1080 Ti", "nvidia", "pascal", 11, 0, 0.177, 11.3, 484, P, 16, False,
       "NVIDIA GeForce GTX 1080 Ti specifications (nvidia.com, 2017); fp16 rate 1/64 per Pascal GP102", C,
       ("gtx-1080-ti", "1080ti")),
    _g("p100-16gb", "Tesla P100 PCIe 16GB", "nvidia", "pascal", 16, 0, 18.7, 9.3, 732, P, 16, False,
       "NVIDIA Tesla P100 PCIe datasheet (2016)", 29, ("p100", "tesla-p100")),
    # Ampere GeForce
    _g("rtx-3060-12gb", "GeForce RTX 3060", "nvidia", "ampere", 12, 25.6, 25.6, 12.7, 360, P, 32, True,
       "NVIDIA GeForce RTX 3060 specifications (nvidia.com, 2021); tensor rate per GA106 = 1/2 of fp16-accumulate",
       C, ("rtx-3060", "rtx3060")),
    _g("rtx-3070-8gb", "GeForce RTX 3070", "nvidia", "ampere", 8, 40.6, 40.6, 20.3, 448, P, 32, True, AMPERE_WP, C,
       ("rtx-3070", "rtx3070")),
    _g("rtx-3080-10gb", "GeForce RTX 3080", "nvidia", "ampere", 10, 59.5, 59.5, 29.8, 760, P, 32, True,
       AMPERE_WP, C, ("rtx-3080", "rtx3080")),
    _g("rtx-3090-24gb", "GeForce RTX 3090", "nvidia", "ampere", 24, 71, 71, 35.6, 936, N, 56.25, True,
       AMPERE_WP + "; NVLink bridge 112.5 GB/s both directions", C, ("rtx-3090", "rtx3090", "3090")),
    # Ada GeForce
    _g("rtx-4060-ti-16gb", "GeForce RTX 4060 Ti 16GB", "nvidia", "ada", 16, 44.1, 44.1, 22.1, 288, P, 16, True,
       ADA_WP, C, ("rtx-4060-ti", "rtx4060ti")),
    _g("rtx-4070-12gb", "GeForce RTX 4070", "nvidia", "ada", 12, 58.3, 58.3, 29.1, 504, P, 16, True, ADA_WP, C,
       ("rtx-4070", "rtx4070")),
    _g("rtx-4070-ti-12gb", "GeForce RTX 4070 Ti", "nvidia", "ada", 12, 80.2, 80.2, 40.1, 504, P, 16, True, ADA_WP,
       C, ("rtx-4070-ti", "rtx4070ti")),
    _g("rtx-4080-16gb", "GeForce RTX 4080", "nvidia", "ada", 16, 97.5, 97.5, 48.7, 716.8, P, 32, True, ADA_WP, C,
       ("rtx-4080", "rtx4080")),
    _g("rtx-4090-24gb", "GeForce RTX 4090", "nvidia", "ada", 24, 165.2, 165.2, 82.6, 1008, P, 32, True, ADA_WP, C,
       ("rtx-4090", "rtx4090", "4090")),
    # Blackwell GeForce (the reference table's 16 GB RTX 5070 and 20 GB RTX 5080 are wrong: 12 GB and 16 GB)
    _g("rtx-5060-ti-16gb", "GeForce RTX 5060 Ti 16GB", "nvidia", "blackwell", 16, 47.4, 47.4, 23.7, 448, P, 64,
       True, BLACKWELL_WP, C, ("rtx-5060-ti", "rtx5060ti")),
    _g("rtx-5070-12gb", "GeForce RTX 5070", "nvidia", "blackwell", 12, 61.7, 61.7, 30.9, 672, P, 64, True,
       BLACKWELL_WP, C, ("rtx-5070", "rtx5070")),
    _g("rtx-5080-16gb", "GeForce RTX 5080", "nvidia", "blackwell", 16, 112.6, 112.6, 56.3, 960, P, 64, True,
       BLACKWELL_WP, C, ("rtx-5080", "rtx5080")),
    _g("rtx-5090-32gb", "GeForce RTX 5090", "nvidia", "blackwell", 32, 209.5, 209.5, 104.8, 1792, P, 64, True,
       BLACKWELL_WP, C, ("rtx-5090", "rtx5090", "5090")),
    # Professional Ampere
    _g("rtx-a5000-24gb", "RTX A5000", "nvidia", "ampere", 24, 111.1, 111.1, 27.8, 768, N, 56.25, True,
       "NVIDIA RTX A5000 datasheet (2021); tensor 222.2 TFLOPS with sparsity", C, ("a5000", "rtx-a5000")),
    _g("rtx-a6000-48gb", "RTX A6000", "nvidia", "ampere", 48, 154.8, 154.8, 38.7, 768, N, 56.25, True,
       "NVIDIA RTX A6000 datasheet (2020); tensor 309.7 TFLOPS with sparsity", C, ("a6000", "rtx-a6000")),
    # Data centre
    _g("t4-16gb", "Tesla T4", "nvidia", "turing", 16, 0, 65, 8.1, 320, P, PCIE3_X16 / GB_PER_S, False,
       "NVIDIA T4 datasheet (2019)", 16, ("t4", "tesla-t4")),
    _g("v100-16gb", "Tesla V100 SXM2 16GB", "nvidia", "volta", 16, 0, 125, 15.7, 900, N, 150, False,
       "NVIDIA V100 datasheet (2020), SXM2; NVLink 300 GB/s both directions", 61, ("v100-sxm2-16gb",)),
    _g("v100-32gb", "Tesla V100 SXM2 32GB", "nvidia", "volta", 32, 0, 125, 15.7, 900, N, 150, False,
       "NVIDIA V100 datasheet (2020), SXM2; NVLink 300 GB/s both directions", 61,
       ("v100", "tesla-v100", "v100-sxm2-32gb")),
    _g("a10g-24gb", "A10G", "nvidia", "ampere", 24, 70, 70, 31.52, 600, P, 32, True,
       "AWS EC2 G5 A10G figures as compiled in Baseten 'NVIDIA A10 vs A10G' (2023)", 48, ("a10g",)),
    _g("l4-24gb", "L4", "nvidia", "ada", 24, 121, 121, 30.3, 300, P, 32, True,
       "NVIDIA L4 datasheet (2023); 242 TFLOPS fp16 with sparsity", 48, ("l4",)),
    _g("l40s-48gb", "L40S", "nvidia", "ada", 48, 362.05, 362.05, 91.6, 864, P, 32, True,
       "NVIDIA L40S datasheet (2023); 733 TFLOPS with sparsity", 96, ("l40s",)),
    _g("a100-40gb", "A100 SXM4 40GB", "nvidia", "ampere", 40, 312, 312, 19.5, 1555, N, 300, True,
       "NVIDIA A100 datasheet (2021); NVLink 600 GB/s both directions", 144, ("a100-sxm4-40gb",)),
    _g("a100-80gb", "A100 SXM4 80GB", "nvidia", "ampere", 80, 312, 312, 19.5, 2039, N, 300, True,
       "NVIDIA A100 datasheet (2021); NVLink 600 GB/s both directions", 144, ("a100", "a100-sxm4-80gb")),
    _g("h100-pcie-80gb", "H100 PCIe", "nvidia", "hopper", 80, 756, 756, 51, 2000, P, PCIE5_X16 / GB_PER_S, True,
       "NVIDIA H100 Tensor Core GPU datasheet (2023), PCIe; 1,513 TFLOPS with sparsity", 128, ("h100-pcie",)),
    _g("h100-sxm-80gb", "H100 SXM", "nvidia", "hopper", 80, 989, 989, 67, 3350, N, 450, True,
       "NVIDIA H100 Tensor Core GPU datasheet (2023), SXM; NVLink 900 GB/s both directions", 256,
       ("h100", "h100-sxm", "h100-80gb")),
    _g("h100-nvl-94gb", "H100 NVL", "nvidia", "hopper", 94, 835, 835, 60, 3900, N, 300, True,
       "NVIDIA H100 Tensor Core GPU datasheet (2023), NVL; NVLink bridge 600 GB/s both directions", 128,
       ("h100-nvl",)),
    _g("h200-141gb", "H200 SXM", "nvidia", "hopper", 141, 989, 989, 67, 4800, N, 450, True,
       "NVIDIA H200 Tensor Core GPU datasheet (2024), SXM", 256, ("h200", "h200-sxm")),
    _g("b200-180gb", "B200", "nvidia", "blackwell", 180, 2250, 2250, 75, 8000, N, 900, True,
       "NVIDIA DGX B200 datasheet (2024): 8 GPUs, 1,440 GB, 64 TB/s, 18 PFLOPS fp16 dense-equivalent; "
       "NVLink 5 1.8 TB/s both directions", 256, ("b200",)),
    _g("mi300x-192gb", "Instinct MI300X", "amd", "cdna3", 192, 1307.4, 1307.4, 163.4, 5300, IF, 448, True,
       "AMD Instinct MI300X data sheet (2023); Infinity Fabric 896 GB/s aggregate", 256, ("mi300x",)),
)

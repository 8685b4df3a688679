"""What each GPU gives a program, not what its box says: the total the driver reports (NVML's memory.total, the
"Memory-Usage" total nvidia-smi prints), which the planner plans against.

It is less than the marketed size where the card reserves memory: ECC on GDDR6 data-centre and workstation cards
(a T4 reports 15.0 GiB of its 16, an L4 or A10G 22.5 of 24, an L40S 45.0 of 48), the driver's own reserve on
HBM parts (an H100 80GB reports 79.6 GiB), and on Blackwell GeForce cards (an RTX 5090 reports 31.8 GiB of 32).
Planning against the marketed size turned "fits, 1 GiB headroom" on an L4 into an out-of-memory error.

Every figure is the total printed by `nvidia-smi` on that card, as found in public nvidia-smi outputs in GitHub
repositories and issues (read 2026-11-25), unless its row names another source; where readings of one card
differ between drivers (an RTX 4080: 16376 or 16384 MiB), the smaller one. The CUDA context and the caching
allocator's slack come out of this total too; the memory model counts them (planner.constants).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.units import MiB

NVIDIA_SMI = "nvidia-smi total in public outputs (GitHub repositories and issues, read 2026-11-25)"


@dataclass(frozen=True)
class UsableMemory:
    total_bytes: int
    source: str
    note: str = ""


def _smi(mib: int, note: str = "") -> UsableMemory:
    return UsableMemory(mib * MiB, NVIDIA_SMI, note)


USABLE_MEMORY: dict[str, UsableMemory] = {
    "rtx-2060-6gb": _smi(6144),
    "rtx-2070-8gb": _smi(8192),
    "rtx-2080-8gb": _smi(8192),
    "rtx-2080-ti-11gb": _smi(11264),
    "gtx-1080-ti-11gb": _smi(11264),
    "p100-16gb": _smi(16280, "Tesla P100-PCIE-16GB, ECC on"),
    "rtx-3060-12gb": _smi(12288),
    "rtx-3070-8gb": _smi(8192),
    "rtx-3080-10gb": _smi(10240),
    "rtx-3090-24gb": _smi(24576),
    "rtx-4060-ti-16gb": _smi(16380),
    "rtx-4070-12gb": _smi(12282),
    "rtx-4070-ti-12gb": _smi(12282),
    "rtx-4080-16gb": _smi(16376),
    "rtx-4090-24gb": _smi(24564),
    "rtx-5060-ti-16gb": _smi(16311),
    "rtx-5070-12gb": _smi(12227),
    "rtx-5080-16gb": _smi(16303),
    "rtx-5090-32gb": _smi(32607),
    "rtx-a5000-24gb": _smi(24564, "ECC off (the card's default); 23028 MiB with ECC on"),
    "rtx-a6000-48gb": _smi(49140, "ECC off (the card's default); 46068 MiB with ECC on, as some clouds run it"),
    "t4-16gb": _smi(15360, "ECC on, as every cloud runs it"),
    "v100-16gb": _smi(16160),
    "v100-32gb": _smi(32510),
    "a10g-24gb": _smi(23028, "ECC on (AWS g5)"),
    "l4-24gb": _smi(23034, "ECC on"),
    "l40s-48gb": _smi(46068, "ECC on"),
    "a100-40gb": _smi(40960),
    "a100-80gb": _smi(81920),
    "h100-pcie-80gb": _smi(81559),
    "h100-sxm-80gb": _smi(81559, "NVML names it 'NVIDIA H100 80GB HBM3'"),
    "h100-nvl-94gb": _smi(95830),
    "h200-141gb": _smi(143771),
    "b200-180gb": _smi(183359),
    "mi300x-192gb": UsableMemory(
        196592 * MiB, "torch.cuda.get_device_properties on ROCm 6.2: total_memory=196592MB "
                      "(github.com/ROCm/legacy-rocm-build/issues/4203, 2024-12-27)"),
}

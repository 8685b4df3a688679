"""Dated per-GPU-hour prices, each with its source. A class without a row has no price on record:
the planner says so and asks for hardware.hourly_usd_per_gpu instead of guessing."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Price:
    on_demand_hourly_usd: float
    spot_hourly_usd: float
    source: str


RUNPOD_2026_03 = "RunPod list prices, on-demand / spot, as compiled by deploybase.ai (2026-03-10)"
RUNPOD_SERVERLESS = "RunPod Serverless flex rate per second x 3600 (docs.runpod.io/serverless/pricing, read 2026-11)"
HF_SPACES = "Hugging Face Spaces hardware price per GPU (huggingface.co/docs/hub/spaces-gpus, read 2026-11)"
OPENRELAY_2026_09 = "OpenRelay GPU pricing calculator (openrelay.inc, read 2026-09-20)"

PRICES: dict[str, Price] = {
    "rtx-3090-24gb": Price(0.39, 0.22, RUNPOD_2026_03),
    "rtx-4090-24gb": Price(0.60, 0.34, RUNPOD_2026_03),
    "rtx-5090-32gb": Price(1.22, 0.69, RUNPOD_2026_03),
    "l4-24gb": Price(0.78, 0.44, RUNPOD_2026_03),
    "l40s-48gb": Price(1.40, 0.79, RUNPOD_2026_03),
    "a100-80gb": Price(2.45, 1.39, RUNPOD_2026_03),
    "h100-pcie-80gb": Price(3.51, 1.99, RUNPOD_2026_03),
    "h100-sxm-80gb": Price(4.76, 2.69, RUNPOD_2026_03),
    "h200-141gb": Price(6.35, 3.59, RUNPOD_2026_03),
    "b200-180gb": Price(10.57, 5.98, RUNPOD_2026_03),
    "rtx-a5000-24gb": Price(0.684, 0.0, RUNPOD_SERVERLESS),
    "rtx-a6000-48gb": Price(1.224, 0.0, RUNPOD_SERVERLESS),
    "a10g-24gb": Price(1.50, 0.0, HF_SPACES + " (a10g-large)"),
    "t4-16gb": Price(0.40, 0.0, HF_SPACES + " (t4-small)"),
    "a100-40gb": Price(0.80, 0.0, OPENRELAY_2026_09),
}

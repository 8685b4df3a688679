"""The planner's allocator-slack constants (planner/constants.py SLACK_*), fitted again from the simulated rows.

`make bench-simulate` stores, per row, the step's simulated allocated peak and the reserved peak of PyTorch's caching
allocator replayed on the same allocations (benchmarks/results/simulate.csv). The slack is their difference. This
fits it, by non-negative least squares weighted by 1 / reserved bytes, to the short-lived blocks the planner knows
(planner.memory.allocator_slack_terms): one fp32 loss block, one layer's saved tensors, ZeRO-3's flat gather buffer
and, for a full or partial fine-tune under ZeRO 1-3, the optimizer step's transient and the gradients; a quantised
model's largest dequantised weight; ZeRO 1-2's reduce bucket, held through backward; a tied embedding's gradients
as backward ends. It prints the
coefficients, the error of simulated allocated + modelled slack against the replay (worst under and over: the
SLACK_MODEL_ERROR range) and the flat 12 % it replaced.

    python -m benchmarks.slack_fit
"""

from __future__ import annotations

import csv
import statistics

import numpy as np

from common.units import GiB
from contract.schema import Hardware, TrainingSpec
from planner import constants as k
from planner import recipes
from planner.catalog import Catalog, default_catalog
from planner.memory import SLACK_PER_BYTE, allocator_slack_terms, per_gpu_memory
from planner.parameters import parameter_split
from planner.transient_blocks import transient_block_bytes

FEATURES = ("logits block", "layer", "fetch buffer", "optimizer step", "gradients", "dequantised", "reduce bucket",
            "tied gradients")
LOADING_PHASE = "init:"  # a simulated peak before the first step (benchmarks/simulate.py: Simulated.loading_bytes)
FLAT_FRACTION = k.ALLOCATOR_OVERHEAD_FRACTION  # the slack the planner assumed before this fit


def features(model: str, t: TrainingSpec, world_size: int, catalog: Catalog) -> list[float]:
    """The row's short-lived block bytes, as planner.memory weighs them (in SLACK_PER_BYTE's order)."""
    spec = catalog.model(model)
    a = spec.architecture
    b = per_gpu_memory(spec, t, Hardware(gpu=catalog.gpu("h100-sxm-80gb"), gpus_per_node=world_size))
    split = parameter_split(a, t.method, t.lora, t.train_vision_tower, t.freeze_trainable_layers)
    return list(allocator_slack_terms(b, *transient_block_bytes(a, recipes.activation_spec(t), split), t))


def nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0: drop the most negative and solve again (a handful of features)."""
    active = list(range(x.shape[1]))
    while True:
        solved, *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
        if (solved >= 0).all():
            break
        active.pop(int(np.argmin(solved)))
    coefficients = np.zeros(x.shape[1])
    coefficients[active] = solved
    return coefficients


def main() -> None:
    from benchmarks.simulate_rows import RESULTS_CSV, table_rows

    catalog = default_catalog()
    rows = {r.label: r for r in table_rows()}
    labels, allocated, reserved, x = [], [], [], []
    with RESULTS_CSV.open() as f:
        for r in csv.DictReader(f):
            # a row whose peak is loading's (a quantised model whole before the first step) reserves that, not a
            # step's short-lived blocks
            if r["row"] in rows and int(r.get("simulated_reserved_bytes") or 0) and \
                    not r["peak_at"].startswith(LOADING_PHASE):
                row = rows[r["row"]]
                labels.append(r["row"])
                allocated.append(int(r["simulated_bytes"]))
                reserved.append(int(r["simulated_reserved_bytes"]))
                x.append(features(row.model, row.training, row.world_size, catalog))
    a, res, xs = np.array(allocated, float), np.array(reserved, float), np.array(x, float)
    weight = 1 / res
    coefficients = nnls(xs * weight[:, None], (res - a) * weight)
    modelled = (a + xs @ coefficients - res) / res
    flat = (a * (1 + FLAT_FRACTION) - res) / res
    print(f"{len(labels)} rows of {RESULTS_CSV.name}; slack per byte of:")
    for name, c in zip(FEATURES, coefficients, strict=True):
        print(f"  {name:15s} {c:.3f}")
    print(f"in planner/constants.py: {', '.join(str(c) for c in SLACK_PER_BYTE)}")
    for name, errors in (("modelled slack", modelled), (f"flat {FLAT_FRACTION:.0%}", flat)):
        print(f"{name}: reserved median |error| {statistics.median(abs(errors)):.1%}, worst under {errors.min():+.1%} "
              f"({labels[int(errors.argmin())]}), worst over {errors.max():+.1%} ({labels[int(errors.argmax())]}), "
              f"{int((abs(errors) <= 0.05).sum())} rows within 5 %")
    print(f"largest replayed slack: {max(res - a) / GiB:.2f} GiB")


if __name__ == "__main__":
    main()

"""Issue 25, item 3: the planner plans against the memory a GPU's driver reports, not the size on its box."""

from __future__ import annotations

import pytest

from common.units import GiB, MiB
from contract.schema import Hardware, Method, TrainingSpec
from planner.catalog import default_catalog
from planner.fit import fit

CATALOG = default_catalog()


def test_every_catalog_gpu_has_its_reported_memory_with_a_source_and_never_more_than_its_box() -> None:
    for gpu in CATALOG.gpus:
        assert gpu.memory_source, f"{gpu.name}: where the figure comes from"
        assert 0.9 * gpu.marketed_memory_bytes < gpu.memory_bytes <= gpu.marketed_memory_bytes * 1.0001, gpu.name


@pytest.mark.parametrize(("gpu", "reported_gib"), [
    ("t4", 15.0), ("l4", 22.49), ("a10g", 22.49), ("l40s", 44.99), ("h100-sxm-80gb", 79.65), ("rtx-5090", 31.84),
])
def test_ecc_and_driver_reserves_are_taken_out(gpu: str, reported_gib: float) -> None:
    assert CATALOG.gpu(gpu).memory_bytes / GiB == pytest.approx(reported_gib, abs=0.01)


def test_a_job_between_the_reported_and_the_marketed_size_does_not_fit() -> None:
    """The case the issue names: "L4, fits with 1 GiB headroom" against 24 GiB was an out-of-memory error."""
    l4 = CATALOG.gpu("l4")
    model = CATALOG.model("meta-llama/Llama-3.1-8B")
    answers = {}
    for seq in range(1024, 16385, 256):
        result = fit(model, TrainingSpec(method=Method.QLORA, sequence_length=seq, gradient_checkpointing=True),
                     Hardware(gpu=l4, host_memory_bytes=2 ** 40), CATALOG)
        answers[seq] = result
        if l4.memory_bytes < result.per_gpu.total_bytes <= 24 * GiB:
            assert not result.fits and result.capacity_bytes == 23034 * MiB
            return
    pytest.fail("no sequence length lands between 22.5 and 24 GiB; widen the search")

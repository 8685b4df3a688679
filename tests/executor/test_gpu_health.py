"""The GPU health judgement (executor.worker.gpu_health.problems), table-driven: what quarantines a host and what
does not. The readings are written here; NVML itself is not on this machine."""

from __future__ import annotations

import pytest

from executor.worker.gpu_health import DeviceHealth, Reading, problems

TWO = Reading((DeviceHealth(0), DeviceHealth(1)))


@pytest.mark.parametrize(("now", "expected"), [
    (TWO, []),
    # application faults (13, 31, 43) are the job's, not the host's
    (Reading((DeviceHealth(0, xids=(13, 31, 43)), DeviceHealth(1))), []),
    (Reading((DeviceHealth(0, xids=(79,)), DeviceHealth(1))), ["GPU 0: XID 79 (GPU has fallen off the bus)"]),
    (Reading((DeviceHealth(0), DeviceHealth(1, xids=(48, 13)))), ["GPU 1: XID 48 (double-bit ECC error)"]),
    (Reading((DeviceHealth(0),)), ["1 GPU(s) disappeared: NVML sees 1 of 2"]),
    (Reading((DeviceHealth(0, lost=True), DeviceHealth(1))),
     ["GPU 0 is lost (NVML_ERROR_GPU_IS_LOST: fallen off the bus)"]),
    (Reading((DeviceHealth(0, ecc_uncorrected=3), DeviceHealth(1))),
     ["GPU 0: 3 uncorrectable (double-bit) ECC error(s)"]),
    (Reading((DeviceHealth(0, retired_pages_pending=True), DeviceHealth(1, remap_failed=True))),
     ["GPU 0: retired pages pending (reset the GPU to retire them)", "GPU 1: row remapping failed"]),
])
def test_what_makes_a_host_sick(now: Reading, expected: list[str]) -> None:
    assert problems(TWO, now) == expected


def test_ecc_errors_count_from_the_baseline_not_from_the_drivers_start() -> None:
    """Volatile ECC counters run since the driver loaded: a host cleared by an admin takes the count it had then
    as its normal, and only new errors quarantine it again."""
    baseline = Reading((DeviceHealth(0, ecc_uncorrected=5),))
    assert problems(baseline, Reading((DeviceHealth(0, ecc_uncorrected=5),))) == []
    assert problems(baseline, Reading((DeviceHealth(0, ecc_uncorrected=6),))) == \
        ["GPU 0: 1 uncorrectable (double-bit) ECC error(s)"]

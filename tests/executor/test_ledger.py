"""What a hold costs (fleet.ledger.charge_of), table-driven over how it ended."""

from __future__ import annotations

import pytest
from tunefleet.v1 import progress_pb2

from fleet import ledger

START = 1_000_000


def _record(last_step: int, from_step: int = 0, checkpoint: int = 0, gpus: int = 2, nodes: int = 1,
            price: float = 3.6) -> dict[bytes, bytes]:
    return {b"started_at_ms": str(START).encode(), b"gpus": str(gpus).encode(), b"nodes": str(nodes).encode(),
            b"price_usd_per_gpu_hour": str(price).encode(), b"hold_from_step": str(from_step).encode(),
            b"checkpoint_step": str(checkpoint).encode(),
            b"last_event": progress_pb2.ProgressEvent(step=last_step).SerializeToString()}


@pytest.mark.parametrize(("record", "outcome", "gpu_s", "lost_s"), [
    (_record(100), ledger.DONE, 200, 0),  # 100 s on 2 GPUs, all of it kept
    (_record(100), ledger.CANCELLED, 200, 0),  # the team's choice, not a loss
    (_record(100), ledger.FAILED, 200, 200),
    (_record(100, from_step=20, checkpoint=60), ledger.GIVEN_BACK, 200, 100),  # 40 of its 80 steps run again
    (_record(100, from_step=20, checkpoint=60), ledger.HOST_LOST, 200, 100),
    (_record(20, from_step=20, checkpoint=20), ledger.HOST_LOST, 200, 200),  # lost while loading: nothing kept
    (_record(100, gpus=4, nodes=2), ledger.DONE, 800, 0),  # a gang: every node's GPUs
])
def test_a_hold_is_charged_its_gpu_seconds_and_what_of_them_is_lost(record, outcome, gpu_s, lost_s) -> None:
    charge = ledger.charge_of(record, START + 100_000, outcome)
    assert charge is not None
    assert (charge.gpu_seconds, charge.lost_gpu_seconds) == pytest.approx((gpu_s, lost_s))
    assert charge.usd == pytest.approx(gpu_s / 3600 * float(record[b"price_usd_per_gpu_hour"]))


def test_no_open_hold_is_no_charge() -> None:
    assert ledger.charge_of({b"started_at_ms": b"0"}, START, ledger.DONE) is None
    assert ledger.charge_of(_record(1), START - 1, ledger.DONE) is None

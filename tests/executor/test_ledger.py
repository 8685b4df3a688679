"""What a hold costs (fleet.ledger.charge_of), table-driven over how it ended."""

from __future__ import annotations

import pytest
from tunefleet.v1 import progress_pb2

from fleet import ledger
from fleet.record import JobRecord

START = 1_000_000


def _record(last_step: int, from_step: int = 0, checkpoint: int = 0, gpus: int = 2, nodes: int = 1,
            price: float = 3.6, job_id: str = "job", **more: object) -> JobRecord:
    return JobRecord(job_id, started_at_ms=START, gpus=gpus, nodes=nodes, price_usd_per_gpu_hour=price,
                     hold_from_step=from_step, checkpoint_step=checkpoint,
                     last_event=progress_pb2.ProgressEvent(step=last_step).SerializeToString(), **more)


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
    assert charge.usd == pytest.approx(gpu_s / 3600 * record.price_usd_per_gpu_hour)


def test_no_open_hold_is_no_charge() -> None:
    assert ledger.charge_of(JobRecord("job", started_at_ms=0), START, ledger.DONE) is None
    assert ledger.charge_of(_record(1), START - 1, ledger.DONE) is None


def test_complete_runs_teach_their_class_how_long_they_hold_a_host_against_their_prediction(redis_url: str) -> None:
    import redis

    connection = redis.Redis.from_url(redis_url)

    def run(job_id: str, predicted_s: float, held_s: float, gpu_class: str = "a100-80gb", from_step: int = 0,
            outcome: str = ledger.DONE) -> None:
        record = _record(10, from_step=from_step, job_id=job_id, predicted_s=predicted_s, gpu_class=gpu_class,
                         team="t")
        pipe = connection.pipeline(transaction=True)
        ledger.charge(pipe, record, outcome, START + int(held_s * 1000))
        pipe.execute()

    run("one", 100, 130)
    assert ledger.hold_models(connection)["a100-80gb"] == ledger.HoldModel(0.0, pytest.approx(1.3)), \
        "one run: no line yet, the ratio"
    for job_id, predicted_s in (("a", 200), ("b", 400), ("c", 800)):
        run(job_id, predicted_s, 30 + 1.2 * predicted_s)  # 30 s of start-up, then 1.2 x the prediction
    run("resumed", 100, 900, from_step=5)  # a resumed hold ran part of the job: it teaches nothing
    run("failed", 100, 900, outcome=ledger.FAILED)
    run("broken", 1, 500)  # 500 x its prediction: a broken prediction, left out
    run("l40s", 100, 100, gpu_class="l40s-48gb")
    models = ledger.hold_models(connection)
    assert models["l40s-48gb"] == ledger.HoldModel(0.0, pytest.approx(1.0))
    fitted = models["a100-80gb"]  # the line through the four runs, the first (130 = 30 + 1.0 x 100) off it
    assert fitted.held_s(1000) == pytest.approx(1227, rel=0.02) and 0 < fitted.start_s < 60

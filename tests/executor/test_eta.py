"""Expected start of a queued job (fleet.eta): the scheduling rules played forward over the class's hosts,
table-driven."""

from __future__ import annotations

import pytest

from fleet.eta import NOW, Holder, Span, remaining, replay
from fleet.fairshare import ClassQuotas, TeamShare, Waiter
from fleet.ledger import HoldModel

H = 3600.0


def _span(s: float) -> Span:
    return Span(s, 0.5 * s, 2 * s)


def _waiter(job_id: str, duration: Span | None, nodes: int = 1, team: str = "t", tier: int = 1) -> Waiter:
    predicted = (duration.mid_s, duration.low_s, duration.high_s) if duration else None
    return Waiter(job_id, team, (duration.mid_s if duration else H) * nodes, nodes, tier, nodes, predicted)


@pytest.mark.parametrize(("hosts", "ahead", "nodes", "expected"), [
    ([NOW], [], 1, (0, 0, 0)),  # an idle host: now
    ([NOW], [(_span(H), 1)], 1, (H, H / 2, 2 * H)),  # behind one job of an hour on the only host
    ([NOW, NOW], [(_span(H), 1)], 1, (0, 0, 0)),  # two hosts: the other one is free
    ([_span(600), NOW], [(_span(H), 1), (_span(H), 1)], 1, (H, H / 2, 2 * H)),  # 2nd ahead takes the busy host
    ([NOW, _span(600)], [], 2, (600, 300, 1200)),  # a gang of two waits for the busy host
    ([NOW, NOW], [(_span(H), 2)], 1, (H, H / 2, 2 * H)),  # a gang ahead takes both hosts
])
def test_a_queued_job_starts_when_the_jobs_ahead_have_taken_their_hosts(hosts, ahead, nodes, expected) -> None:
    waiters = [_waiter(f"ahead-{i}", d, n) for i, (d, n) in enumerate(ahead)] + [_waiter("me", _span(H), nodes)]
    start = replay(waiters, [Holder(h) for h in hosts], {}, {}, None)["me"]
    assert (start.in_s.mid_s, start.in_s.low_s, start.in_s.high_s) == pytest.approx(expected)
    assert not start.lower_bound


def test_a_job_ahead_without_a_prediction_makes_the_start_a_lower_bound_and_too_few_hosts_no_start() -> None:
    start = replay([_waiter("unknown", None), _waiter("me", _span(H))], [Holder(NOW)], {}, {}, None)["me"]
    assert start.lower_bound and start.in_s == NOW
    assert "me" not in replay([_waiter("me", _span(H), nodes=2)], [Holder(NOW)], {}, {}, None)


def test_durations_are_what_the_class_hold_model_makes_of_the_predictions() -> None:
    waiters = [_waiter("ahead", Span(H, H, H)), _waiter("me", Span(H, H, H))]
    start = replay(waiters, [Holder(Span(600, 600, 600), "t", 1)], {}, {}, None, HoldModel(60, 1.5))["me"]
    assert start.in_s.mid_s == pytest.approx(600 + 60 + 1.5 * H), "behind the running job, then the one ahead"


def test_a_running_job_that_ends_gives_its_team_quota_back_and_its_team_goes_first_again() -> None:
    """Two hosts, each team's quota one: a's job runs for an hour, b's for two. b's queued job would borrow until a's
    job ends; then a (under its quota again) takes the freed host before b's older job, which starts when b's own
    running job ends."""
    shares = {"a": TeamShare(quota_gpus={"c": 1}), "b": TeamShare(quota_gpus={"c": 1})}
    quotas = ClassQuotas("c", {"a": 1, "b": 1}, shares)
    hosts = [Holder(Span(H, H, H), "a", 1), Holder(Span(2 * H, 2 * H, 2 * H), "b", 1)]
    waiters = [_waiter("b-next", Span(H, H, H), team="b"), _waiter("a-next", Span(H, H, H), team="a")]
    starts = replay(waiters, hosts, {}, {}, quotas)
    assert starts["a-next"].in_s.mid_s == H and starts["b-next"].in_s.mid_s == 2 * H


def test_a_running_job_holds_its_host_for_its_progress_eta_else_its_prediction_less_its_run() -> None:
    assert remaining(_span(H), elapsed_s=600, progress_eta_s=1200) == Span(1200, 600, 2400)
    assert remaining(_span(H), elapsed_s=600, progress_eta_s=0) == Span(H - 600, 1200, 2 * H - 600)
    assert remaining(_span(600), elapsed_s=900, progress_eta_s=0) == Span(0, 0, 300)
    assert remaining(None, elapsed_s=10, progress_eta_s=0) == NOW

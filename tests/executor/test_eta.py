"""Expected start of a queued job (fleet.eta): the scheduling rules played forward over the class's hosts,
table-driven."""

from __future__ import annotations

import pytest

from fleet.eta import NOW, Holder, Span, Yielding, remaining, replay
from fleet.ledger import AS_PREDICTED, HoldModel
from fleet.ordering import ClassQuotas, TeamShare, Waiter

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


PREEMPT = Yielding(preemption=True, reclaim=True, takes=Span(5, 0, 300))


def test_a_higher_tier_waiter_preempts_a_lower_tier_run_and_the_victim_waits_again_for_its_rest() -> None:
    """One host, running a low-tier job for two more hours; a high-tier job waits. Without preemption it starts when
    the run ends; with it, once the victim has yielded (5 s, range 0–300 s), and the victim's rest (plus the class's
    start-up) comes after the preemptor's hour, ahead of a normal-tier job queued before."""
    running = Holder(Span(2 * H, 2 * H, 2 * H), "t", 1, job_id="low-run", tier=2, ran_s=600)
    waiters = [_waiter("normal", Span(H, H, H), tier=1), _waiter("high", Span(H, H, H), tier=0)]
    hold = HoldModel(60, 1.0)
    assert replay(waiters, [running], {}, {}, None, hold)["high"].in_s.mid_s == 2 * H
    starts = replay(waiters, [running], {}, {}, None, hold, PREEMPT)
    assert (starts["high"].in_s.mid_s, starts["high"].in_s.low_s, starts["high"].in_s.high_s) == (5, 0, 300)
    # the normal-tier job cannot preempt the high one: it waits out the high job's hour (60 s start-up + 1 h), then
    # takes the host before the victim's rest (a lower tier)
    assert starts["normal"].in_s.mid_s == pytest.approx(5 + 60 + H)
    assert "low-run" not in starts, "a running job the replay made yield is not a waiter of the answer"


def test_preemption_spares_a_run_younger_than_the_minimum_and_one_within_another_teams_quota() -> None:
    running = Holder(Span(H, H, H), "a", 1, job_id="low-run", tier=2, ran_s=60)
    waiter = [_waiter("high", Span(H, H, H), team="b", tier=0)]
    young = Yielding(preemption=True, reclaim=True, min_runtime_s=600, takes=NOW)
    assert replay(waiter, [running], {}, {}, None, AS_PREDICTED, young)["high"].in_s.mid_s == H
    shares = {"a": TeamShare(quota_gpus={"c": 1}), "b": TeamShare(quota_gpus={"c": 0})}
    quotas = ClassQuotas("c", {"a": 1}, shares)
    assert replay(waiter, [running], {}, {}, quotas, AS_PREDICTED, PREEMPT)["high"].in_s.mid_s == H, \
        "team a's run is within its quota: another team's higher tier does not preempt it"


def test_a_team_within_its_quota_reclaims_a_borrowers_host_without_preemption() -> None:
    """Two hosts, both running team b's jobs (quota 1: one borrowed); team a (quota 1, holding none) waits: reclaim
    takes the borrowed host, the latest started of b's, whatever the tier, with preemption off."""
    shares = {"a": TeamShare(quota_gpus={"c": 1}), "b": TeamShare(quota_gpus={"c": 1})}
    quotas = ClassQuotas("c", {"b": 2}, shares)
    hosts = [Holder(Span(2 * H, 2 * H, 2 * H), "b", 1, job_id="b-old", tier=0, ran_s=1200),
             Holder(Span(3 * H, 3 * H, 3 * H), "b", 1, job_id="b-new", tier=0, ran_s=60)]
    reclaim_only = Yielding(reclaim=True, takes=Span(5, 0, 300))
    starts = replay([_waiter("a-1", Span(H, H, H), team="a", tier=2)], hosts, {}, {}, quotas, AS_PREDICTED,
                    reclaim_only)
    assert starts["a-1"].in_s.mid_s == 5
    assert replay([_waiter("a-1", Span(H, H, H), team="a", tier=2)], hosts, {}, {}, quotas)["a-1"].in_s.mid_s == 2 * H


def test_a_run_already_asked_to_yield_frees_its_host_within_the_yield_and_queues_again_first() -> None:
    hosts = [Holder(Span(2 * H, 2 * H, 2 * H), "t", 1, job_id="yielding", tier=2, ran_s=600, yielding=True)]
    waiters = [_waiter("high", Span(H, H, H), tier=0), _waiter("low", Span(H, H, H), tier=2)]
    starts = replay(waiters, hosts, {}, {}, None, AS_PREDICTED, Yielding(takes=Span(5, 0, 300)))
    assert starts["high"].in_s.mid_s == 5
    assert starts["low"].in_s.mid_s == pytest.approx(5 + H + (2 * H - 5)), "the yielded run's rest goes first"

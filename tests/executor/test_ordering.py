"""fleet.ordering.victim, pure: each numbered criterion of the victim order decides when the ones before it tie."""

from __future__ import annotations

from fleet.ordering import PREEMPTION, RECLAIM, ClassQuotas, Running, TeamShare, Waiter, victim

NOW_S = 1_000.0


def _waiter(team: str = "a", tier: int = 0, gpus: int = 1) -> Waiter:
    return Waiter("w", team, 0.0, gpus, tier)


def test_preemption_takes_a_lower_tier_never_a_young_or_yielding_job_then_the_lowest_tier() -> None:
    same_tier = Running("same", "a", 0, 10.0)
    young = Running("young", "a", 2, NOW_S - 5)
    yielding = Running("yielding", "a", 2, 10.0, yields_to_tier=0)
    normal = Running("normal", "a", 1, 10.0)
    low = Running("low", "a", 2, 20.0)
    pick = lambda running: victim(PREEMPTION, _waiter(), running, {}, None, NOW_S - 60)  # noqa: E731
    assert pick([same_tier, young, yielding]) is None, "V1: none of them may yield to this waiter"
    assert pick([same_tier, young, yielding, normal]) == normal
    assert pick([normal, low]) == low, "V2: the lowest tier first"


def test_among_one_tier_the_least_work_lost_then_the_latest_started_then_the_id() -> None:
    costly = Running("costly", "a", 2, 50.0, lost_gpu_s=900.0)
    cheap_old = Running("cheap-old", "a", 2, 10.0, lost_gpu_s=5.0)
    cheap_new = Running("cheap-new", "a", 2, 40.0, lost_gpu_s=5.0)
    twin = Running("cheap-nex", "a", 2, 40.0, lost_gpu_s=5.0)
    pick = lambda running: victim(PREEMPTION, _waiter(), running, {}, None, NOW_S)  # noqa: E731
    assert pick([costly, cheap_old]) == cheap_old, "V3: the least work lost"
    assert pick([costly, cheap_old, cheap_new]) == cheap_new, "V4: then the latest started"
    assert pick([twin, cheap_new]) == cheap_new == pick([cheap_new, twin]), "V5: then the id, whatever the order"


def test_with_quotas_preemption_spares_another_teams_job_within_its_quota_and_reclaim_takes_a_borrowers() -> None:
    shares = {"a": TeamShare(quota_gpus={"c": 2}), "b": TeamShare(quota_gpus={"c": 2})}
    quotas = ClassQuotas("c", {"a": 1, "b": 3}, shares)
    held = dict(quotas.held_gpus)
    b_job = Running("b-low", "b", 2, 10.0)
    within = ClassQuotas("c", {"a": 1, "b": 2}, shares)
    assert victim(PREEMPTION, _waiter("a"), [b_job], {"a": 1, "b": 2}, within, NOW_S) is None, \
        "b holds no more than its quota: a's higher tier does not take its host"
    assert victim(PREEMPTION, _waiter("a"), [b_job], held, quotas, NOW_S) == b_job, "b borrows: it may yield"
    assert victim(RECLAIM, _waiter("a", tier=2), [b_job], held, quotas, NOW_S) == b_job, \
        "reclaim whatever the tiers, for a waiter within its quota"
    assert victim(RECLAIM, _waiter("a", gpus=2), [b_job], held, quotas, NOW_S) is None, \
        "a waiter that would borrow itself reclaims nothing"
    assert victim(RECLAIM, _waiter("a"), [b_job], held, None, NOW_S) is None, "no quotas: no reclaim"


def test_reclaim_takes_the_borrowers_job_that_loses_least_whatever_its_tier() -> None:
    shares = {"a": TeamShare(quota_gpus={"c": 2}), "b": TeamShare(quota_gpus={"c": 1})}
    quotas = ClassQuotas("c", {"a": 0, "b": 3}, shares)
    high_cheap = Running("b-high", "b", 0, 10.0, lost_gpu_s=5.0)
    low_costly = Running("b-low", "b", 2, 10.0, lost_gpu_s=900.0)
    assert victim(RECLAIM, _waiter("a"), [low_costly, high_cheap], dict(quotas.held_gpus), quotas, NOW_S) \
        == high_cheap, "V2 is preemption's only: reclaim orders by work lost (V3)"

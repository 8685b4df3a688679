"""Weighted fair sharing, the pure order: teams interleave in proportion to their weights, recent usage moves a
team back, FIFO within a team, and one team's queue stays FIFO; usage decays with its half-life."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.ordering import (
    USAGE_HALF_LIFE_S,
    ClassQuotas,
    Line,
    TeamShare,
    Waiter,
    decayed,
    fair_order,
    start_line,
)
from tests.executor.worker_steps import dequeue


def _waiters(*teams: str, gpu_s: float = 100.0) -> list[Waiter]:
    return [Waiter(f"{team}{i}", team, gpu_s) for i, team in enumerate(teams)]


def test_equal_teams_alternate_and_each_team_keeps_its_own_order() -> None:
    waiters = _waiters("a", "a", "a", "b", "b")  # a0 a1 a2 b3 b4 in FIFO order
    assert fair_order(waiters, {}, {}) == ["a0", "b3", "a1", "b4", "a2"]


def test_a_team_with_twice_the_weight_gets_twice_the_starts() -> None:
    waiters = _waiters(*("a" * 6), *("b" * 6))
    order = fair_order(waiters, {}, {"a": 2.0, "b": 1.0})
    first_six = [j[0] for j in order[:6]]
    assert first_six.count("a") == 4 and first_six.count("b") == 2


def test_recent_usage_puts_a_team_behind_until_the_others_catch_up() -> None:
    waiters = _waiters("a", "a", "b", "b")
    assert fair_order(waiters, {"a": 250.0}, {}) == ["b2", "b3", "a0", "a1"]
    assert fair_order(waiters, {"a": 50.0}, {}) == ["b2", "a0", "b3", "a1"]


def test_longer_jobs_count_for_more() -> None:
    waiters = [Waiter("a-long", "a", 1000.0), Waiter("a-next", "a", 10.0), Waiter("b0", "b", 10.0),
               Waiter("b1", "b", 10.0), Waiter("b2", "b", 10.0)]
    assert fair_order(waiters, {}, {}) == ["a-long", "b0", "b1", "b2", "a-next"]


def test_one_team_is_fifo_and_nothing_is_lost_or_repeated() -> None:
    waiters = _waiters(*"aaaa")
    assert fair_order(waiters, {"a": 1e9}, {"a": 0.5}) == [w.job_id for w in waiters]
    mixed = _waiters(*"abcabcbbca")
    assert sorted(fair_order(mixed, {"c": 30.0}, {"b": 3.0})) == sorted(w.job_id for w in mixed)


def test_a_team_within_its_quota_goes_before_one_that_would_borrow_whatever_their_usage() -> None:
    shares = {"a": TeamShare(quota_gpus={"a100-80gb": 2}), "b": TeamShare(quota_gpus={"a100-80gb": 2})}
    waiters = [Waiter("a0", "a", 10.0, gpus=1), Waiter("b0", "b", 10.0, gpus=1), Waiter("b1", "b", 10.0, gpus=1)]
    quotas = ClassQuotas("a100-80gb", {"a": 2, "b": 0}, shares)  # a runs its whole quota already
    line = start_line(waiters, {"b": 1e6}, {}, quotas)
    assert line == Line(["b0", "b1", "a0"], []), "b is under its quota: first, though it used far more"


def test_a_team_at_its_quota_plus_borrowing_limit_is_held_back_in_fifo_order() -> None:
    shares = {"a": TeamShare(quota_gpus={"a100-80gb": 1}, borrow_gpus={"a100-80gb": 1}), "b": TeamShare()}
    waiters = [Waiter("a0", "a", 10.0, gpus=1), Waiter("b0", "b", 10.0, gpus=4), Waiter("a1", "a", 10.0, gpus=1)]
    line = start_line(waiters, {}, {}, ClassQuotas("a100-80gb", {"a": 1}, shares))
    assert line == Line(["a0", "b0"], ["a1"]), "a may hold 2: a0 takes the second, a1 waits; b has no limit"
    assert start_line(waiters, {}, {}, ClassQuotas("a100-80gb", {"a": 2}, shares)) == Line(["b0"], ["a0", "a1"])


def test_tiers_go_in_order_but_a_job_within_its_quota_goes_before_any_that_would_borrow() -> None:
    shares = {"a": TeamShare(quota_gpus={"a100-80gb": 2}), "b": TeamShare(quota_gpus={"a100-80gb": 2})}
    waiters = [Waiter("a-high", "a", 10.0, tier=0), Waiter("b-normal", "b", 10.0, tier=1),
               Waiter("a-normal", "a", 10.0, tier=1), Waiter("b-low", "b", 10.0, tier=2)]
    quotas = ClassQuotas("a100-80gb", {"a": 2, "b": 0}, shares)  # a holds its quota: each of its jobs borrows
    line = start_line(waiters, {}, {}, quotas)
    assert line.order == ["b-normal", "b-low", "a-high", "a-normal"], "b's low-tier job is within b's quota"
    assert start_line(waiters, {}, {}).order == ["a-high", "b-normal", "a-normal", "b-low"], "no quotas: tier order"


def test_without_quotas_the_line_is_the_fair_order() -> None:
    waiters = _waiters(*"aabba")
    assert start_line(waiters, {"a": 5.0}, {"b": 2.0}) == Line(fair_order(waiters, {"a": 5.0}, {"b": 2.0}), [])


@pytest.mark.parametrize(("elapsed_s", "left"), [(0, 100.0), (USAGE_HALF_LIFE_S, 50.0), (2 * USAGE_HALF_LIFE_S, 25.0)])
def test_usage_halves_every_half_life(elapsed_s: float, left: float) -> None:
    assert decayed(100.0, 1_000.0, 1_000.0 + elapsed_s) == pytest.approx(left)


def test_the_worker_arrangement_puts_the_fair_head_in_front_of_a_real_rq_queue(redis_url: str) -> None:
    import redis
    from tunefleet.v1 import executor_pb2

    from devtools.tiny import make_plan
    from fleet import connection, queues
    from fleet.fairshare import FairShare, charge_usage
    from fleet.jobs import NewJob
    from fleet.lifecycle import Lifecycle

    queue = queues.QueueRef("cpu", executor_pb2.PRIORITY_NORMAL).name
    lifecycle = Lifecycle(connection.connect(redis_url))
    for job_id, team in (("a0", "a"), ("a1", "a"), ("b0", "b")):
        plan = make_plan(Path("/m"), Path("/d.jsonl"), Path(job_id), plan_id=job_id)
        lifecycle.submit(NewJob(plan=plan, queue=queues.QueueRef("cpu", executor_pb2.PRIORITY_NORMAL),
                                gpus=1, timeout_s=600, team=team))
    fair = FairShare(redis.Redis.from_url(redis_url))
    assert fair.order(queue) == ["a0", "b0", "a1"], "no usage yet: the teams alternate from the oldest job"
    pipe = fair.redis.pipeline(transaction=True)
    charge_usage(pipe, "a", 1_000.0)
    pipe.execute()
    assert fair.order(queue) == ["b0", "a0", "a1"]
    assert fair.arrange("cpu") == [queue], "a job of the queue may start"
    assert fair.queues.queued_ids(queue) == ["b0", "a0", "a1"], "the head moved; the rest kept their order"
    assert fair.arrange("cpu") == [queue] and fair.queues.queued_ids(queue) == ["b0", "a0", "a1"], "already in front"
    assert fair.queues.move_to_front(["gone"], queue) == 0 and fair.queues.queued_ids(queue) == ["b0", "a0", "a1"]
    assert fair.queues.move_to_front(["a1", "gone", "a0"], queue) == 2
    assert fair.queues.queued_ids(queue) == ["a1", "a0", "b0"], "the ids given, in their order, then the rest"


def test_the_worker_takes_first_from_the_queue_whose_front_the_class_order_puts_first(redis_url: str) -> None:
    """A class with quotas: b's low-tier job is within b's quota, a's high-tier job would borrow (a holds its quota
    already): the arrangement names the low queue first, so rq's dequeue (which tries queues in that order) takes it."""
    import redis
    from tunefleet.v1 import executor_pb2

    from devtools.tiny import make_plan
    from fleet import connection, queues
    from fleet.fairshare import FairShare
    from fleet.jobs import NewJob
    from fleet.keys import RUNNING_SET, job_key
    from fleet.lifecycle import Lifecycle

    lifecycle = Lifecycle(connection.connect(redis_url))
    fair = FairShare(redis.Redis.from_url(redis_url))
    fair.save_shares({"a": TeamShare(quota_gpus={"cpu": 1}), "b": TeamShare(quota_gpus={"cpu": 1})})
    for job_id, team, priority in (("a-running", "a", executor_pb2.PRIORITY_NORMAL),
                                   ("a-high", "a", executor_pb2.PRIORITY_HIGH),
                                   ("b-low", "b", executor_pb2.PRIORITY_LOW)):
        plan = make_plan(Path("/m"), Path("/d.jsonl"), Path(job_id), plan_id=job_id)
        lifecycle.submit(NewJob(plan=plan, queue=queues.QueueRef("cpu", priority), gpus=1, timeout_s=600, team=team))
    dequeue(fair.redis, "a-running")  # a worker took it: it runs, holding a's quota
    fair.redis.hset(job_key("a-running"), mapping={"started_at_ms": 1, "gpu_class": "cpu"})
    fair.redis.sadd(RUNNING_SET, "a-running")
    assert fair.arrange("cpu") == [queues.QueueRef("cpu", executor_pb2.PRIORITY_LOW).name,
                                   queues.QueueRef("cpu", executor_pb2.PRIORITY_HIGH).name]

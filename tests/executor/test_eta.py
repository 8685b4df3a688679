"""Expected start of a queued job (fleet.eta): replays of the class's hosts and the jobs ahead, table-driven."""

from __future__ import annotations

import pytest

from fleet.eta import NOW, Schedule, Span, remaining

H = 3600.0


def _span(s: float) -> Span:
    return Span(s, 0.5 * s, 2 * s)


@pytest.mark.parametrize(("hosts", "ahead", "nodes", "expected"), [
    ([NOW], [], 1, (0, 0, 0)),  # an idle host: now
    ([NOW], [(_span(H), 1)], 1, (H, H / 2, 2 * H)),  # behind one job of an hour on the only host
    ([NOW, NOW], [(_span(H), 1)], 1, (0, 0, 0)),  # two hosts: the other one is free
    ([_span(600), NOW], [(_span(H), 1), (_span(H), 1)], 1, (H, H / 2, 2 * H)),  # 2nd ahead takes the busy host
    ([NOW, _span(600)], [], 2, (600, 300, 1200)),  # a gang of two waits for the busy host
    ([NOW, NOW], [(_span(H), 2)], 1, (H, H / 2, 2 * H)),  # a gang ahead takes both hosts
])
def test_a_queued_job_starts_when_the_jobs_ahead_have_taken_their_hosts(hosts, ahead, nodes, expected) -> None:
    schedule = Schedule(hosts)
    for duration, n in ahead:
        schedule.take(duration, n)
    start = schedule.start(nodes)
    assert start is not None and (start.in_s.mid_s, start.in_s.low_s, start.in_s.high_s) == pytest.approx(expected)
    assert not start.lower_bound


def test_a_job_ahead_without_a_prediction_makes_the_start_a_lower_bound_and_too_few_hosts_no_start() -> None:
    schedule = Schedule([NOW])
    schedule.take(None)
    start = schedule.start()
    assert start is not None and start.lower_bound and start.in_s == NOW
    assert Schedule([NOW]).start(nodes=2) is None


def test_a_running_job_holds_its_host_for_its_progress_eta_else_its_prediction_less_its_run() -> None:
    assert remaining(_span(H), elapsed_s=600, progress_eta_s=1200) == Span(1200, 600, 2400)
    assert remaining(_span(H), elapsed_s=600, progress_eta_s=0) == Span(H - 600, 1200, 2 * H - 600)
    assert remaining(_span(600), elapsed_s=900, progress_eta_s=0) == Span(0, 0, 300)
    assert remaining(None, elapsed_s=10, progress_eta_s=0) == NOW

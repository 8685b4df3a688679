"""The Fleet page's sampled utilisation: one sample per interval at most, a bounded history, busy fractions."""

from __future__ import annotations

from tunefleet.v1 import executor_pb2

from dashboard.utilisation import Utilisation


def _fleet(busy: int, idle: int, gpu_class: str = "a100-80gb") -> executor_pb2.FleetResponse:
    hosts = [executor_pb2.Host(host_id=f"b{i}", gpu_class=gpu_class, running_job_id=f"j{i}") for i in range(busy)]
    hosts += [executor_pb2.Host(host_id=f"i{i}", gpu_class=gpu_class) for i in range(idle)]
    return executor_pb2.FleetResponse(hosts=hosts)


def test_samples_are_taken_at_most_once_per_interval_as_busy_fractions_per_class() -> None:
    u = Utilisation(interval_s=60, history_s=3600)
    u.record(_fleet(1, 3), now_s=0)
    u.record(_fleet(4, 0), now_s=30)  # within the interval: not a new sample
    mixed = _fleet(2, 2)
    mixed.hosts.append(executor_pb2.Host(host_id="c", gpu_class="cpu"))
    u.record(mixed, now_s=60)
    series = u.series()
    assert series["time_s"] == [0, 60]
    assert series["classes"] == {"a100-80gb": [0.25, 0.5], "cpu": [None, 0.0]}, "a class absent then is a gap"


def test_the_history_is_bounded() -> None:
    u = Utilisation(interval_s=60, history_s=600)
    for minute in range(100):
        u.record(_fleet(1, 1), now_s=minute * 60.0)
    times = u.series()["time_s"]
    assert len(times) == 11 and times[-1] == 99 * 60.0  # type: ignore[index, arg-type]

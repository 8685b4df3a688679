"""The executor service's Prometheus metrics: events streamed to watchers, and fleet state read from Redis at
scrape time (queue depth per queue, jobs by phase, events written, live hosts and their heartbeat age, each team's
measured usage this month)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import prometheus_client
import redis
import structlog
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from tunefleet.v1 import progress_pb2

from fleet.ledger import month_of

if TYPE_CHECKING:
    from executor.service.servicer import Executor

log = structlog.get_logger("executor.service.metrics")
EVENTS_STREAMED = Counter("tunefleet_watch_events_streamed_total", "progress events sent to Watch clients")
# Jobs read per scrape for the per-phase counts: the newest ones, so a scrape costs bounded work.
SCRAPE_JOBS_LIMIT = 10_000


class FleetCollector(Collector):
    """Reads the fleet's state from Redis on each scrape, through the most recently created service."""

    executor: Executor | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self.executor is None:
            return
        try:
            yield from self._collect(self.executor)
        except redis.RedisError as e:
            log.warning("metrics.redis_unavailable", error=str(e))

    def _collect(self, executor: Executor) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily("tunefleet_queue_depth", "jobs waiting in each queue", labels=["queue"])
        for name, count in executor.queues.depths().items():
            depth.add_metric([name], count)
        yield depth
        by_phase, written = executor.store.phase_counts(SCRAPE_JOBS_LIMIT)
        jobs = GaugeMetricFamily("tunefleet_jobs", "jobs by phase (newest jobs, up to the scrape limit)",
                                 labels=["phase"])
        for phase, count in by_phase.items():
            if phase:
                jobs.add_metric([progress_pb2.Phase.Name(phase).removeprefix("PHASE_").lower()], count)
        yield jobs
        yield GaugeMetricFamily("tunefleet_events_written", "progress events written by those jobs",
                                value=written)
        age = GaugeMetricFamily("tunefleet_host_heartbeat_age_seconds", "seconds since each live host's heartbeat",
                                labels=["host_id", "gpu_class"])
        now = time.time()
        for host in executor.hosts.hosts():
            age.add_metric([host.host_id, host.gpu_class], now - host.last_heartbeat.ToNanoseconds() / 1e9)
        yield age
        month = month_of(int(now * 1000))
        spend = GaugeMetricFamily("tunefleet_team_spend_usd", "measured cost of each team's GPU holds this month "
                                  "(fleet.ledger)", labels=["team", "month"])
        held = GaugeMetricFamily("tunefleet_team_gpu_seconds", "GPU-seconds each team's jobs held this month, and of "
                                 "them lost (a failed run, steps run again)", labels=["team", "month", "kind"])
        for team, totals in executor.accounts.ledger.month_totals(month).items():
            spend.add_metric([team, month], totals.get("usd", 0.0))
            held.add_metric([team, month, "held"], totals.get("gpu_s", 0.0))
            held.add_metric([team, month, "lost"], totals.get("lost_gpu_s", 0.0))
        yield spend
        yield held


_COLLECTOR = FleetCollector()
prometheus_client.REGISTRY.register(_COLLECTOR)


def register_fleet_collector(executor: Executor) -> None:
    _COLLECTOR.executor = executor

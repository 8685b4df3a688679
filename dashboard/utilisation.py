"""The fleet's utilisation over the last hours, sampled by the dashboard itself: each sample is the share of hosts
running a job, per GPU class, taken from a Fleet answer at most once per SAMPLE_INTERVAL_S (whenever someone opens
the Fleet page, and in the background when the dashboard has a token of its own). A bounded ring: HISTORY_S of
samples, then the oldest goes. Lost on restart; the executor's Prometheus metrics keep the long history."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

from tunefleet.v1 import executor_pb2

SAMPLE_INTERVAL_S = 60.0
HISTORY_S = 6 * 3600.0


@dataclass(frozen=True)
class Sample:
    time_s: float
    busy_by_class: dict[str, int]
    hosts_by_class: dict[str, int]


def sample_of(fleet: executor_pb2.FleetResponse, time_s: float) -> Sample:
    busy: dict[str, int] = {}
    hosts: dict[str, int] = {}
    for h in fleet.hosts:
        hosts[h.gpu_class] = hosts.get(h.gpu_class, 0) + 1
        busy[h.gpu_class] = busy.get(h.gpu_class, 0) + (1 if h.running_job_id or h.running_team else 0)
    return Sample(time_s, busy, hosts)


class Utilisation:
    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S, history_s: float = HISTORY_S) -> None:
        self._interval_s = interval_s
        self._history_s = history_s
        self._samples: deque[Sample] = deque(maxlen=max(2, int(history_s / interval_s) + 1))
        self._lock = threading.Lock()

    def record(self, fleet: executor_pb2.FleetResponse, now_s: float | None = None) -> None:
        now_s = time.time() if now_s is None else now_s
        with self._lock:
            if self._samples and now_s - self._samples[-1].time_s < self._interval_s:
                return
            self._samples.append(sample_of(fleet, now_s))

    def series(self) -> dict[str, object]:
        """{'time_s': [...], 'classes': {class: [busy fraction or None, ...]}, 'history_s': ..., 'sample_interval_s':
        ...} for the Fleet page's chart (its time axis spans the samples held, at least a few intervals)."""
        with self._lock:
            samples = list(self._samples)
        classes = sorted({c for s in samples for c in s.hosts_by_class})
        return {"time_s": [s.time_s for s in samples], "history_s": self._history_s,
                "sample_interval_s": self._interval_s,
                "classes": {c: [s.busy_by_class.get(c, 0) / s.hosts_by_class[c] if s.hosts_by_class.get(c) else None
                                for s in samples] for c in classes}}

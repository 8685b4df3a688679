"""structlog setup: JSON lines for services, readable console for a terminal."""

from __future__ import annotations

import logging
import sys
import threading
import time

import structlog

# Message kinds a SampledFilter tracks before it starts afresh (a bound on its memory).
MAX_SAMPLED_KINDS = 1_000


def configure_logging(json: bool | None = None, level: int = logging.INFO) -> None:
    if json is None:
        json = not sys.stderr.isatty()
    renderer = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True), structlog.processors.format_exc_info,
                    renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


class Sampled:
    """Counts an event and says when to log it: the first time, then at most once per `interval_s` (with the count
    since the last line), so a flood of denied calls cannot flood the log."""

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._last = -interval_s
        self._count = 0

    def due(self) -> int:
        """0 when not to log now; else how many events this line stands for."""
        with self._lock:
            self._count += 1
            now = time.monotonic()
            if now - self._last < self._interval_s:
                return 0
            self._last, count, self._count = now, self._count, 0
            return count


class SampledFilter(logging.Filter):
    """Lets a standard-library log line of each kind (its logger and message template) through the first time,
    then at most once per `interval_s`, saying how many it stands for: a flood (an accept loop out of file
    descriptors, a client sending garbage) cannot fill a disk."""

    def __init__(self, interval_s: float) -> None:
        super().__init__()
        self._interval_s = interval_s
        self._kinds: dict[tuple[str, str], Sampled] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg)[:200])
        with self._lock:
            sampled = self._kinds.get(key)
            if sampled is None:
                if len(self._kinds) >= MAX_SAMPLED_KINDS:
                    self._kinds.clear()
                sampled = self._kinds[key] = Sampled(self._interval_s)
        count = sampled.due()
        if count > 1:
            record.msg = f"{record.msg} (and {count - 1} more like it in the last {self._interval_s:g} s)"
        return count > 0

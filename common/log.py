"""structlog setup: JSON lines for services, readable console for a terminal."""

from __future__ import annotations

import logging
import sys
import threading
import time

import structlog


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


class SampledByKind:
    """A Sampled per kind of event (a log line's template, a caller's refused action): each kind logged the first
    time, then at most once per `interval_s`. At most `max_kinds` are tracked; past that the table starts afresh (a
    bound on its memory, at the cost of one early line per kind)."""

    def __init__(self, interval_s: float, max_kinds: int) -> None:
        self.interval_s = interval_s
        self._max_kinds = max_kinds
        self._kinds: dict[object, Sampled] = {}
        self._lock = threading.Lock()

    def due(self, kind: object) -> int:
        """0 when not to log this kind now; else how many events of it this line stands for."""
        with self._lock:
            sampled = self._kinds.get(kind)
            if sampled is None:
                if len(self._kinds) >= self._max_kinds:
                    self._kinds.clear()
                sampled = self._kinds[kind] = Sampled(self.interval_s)
        return sampled.due()


# Message kinds a SampledFilter tracks before it starts afresh.
MAX_SAMPLED_KINDS = 1_000


class SampledFilter(logging.Filter):
    """Lets a standard-library log line of each kind (its logger and message template) through the first time,
    then at most once per `interval_s`, saying how many it stands for: a flood (an accept loop out of file
    descriptors, a client sending garbage) cannot fill a disk."""

    def __init__(self, interval_s: float) -> None:
        super().__init__()
        self._sampled = SampledByKind(interval_s, MAX_SAMPLED_KINDS)

    def filter(self, record: logging.LogRecord) -> bool:
        count = self._sampled.due((record.name, str(record.msg)[:200]))
        if count > 1:
            record.msg = f"{record.msg} (and {count - 1} more like it in the last {self._sampled.interval_s:g} s)"
        return count > 0

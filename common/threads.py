"""A thread pool whose threads end when idle, for gRPC servers: a burst of 300 Watch streams starts threads up
to the pool's size, and once the streams end those threads end too, instead of staying for the process's life
(concurrent.futures.ThreadPoolExecutor never retires a thread)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

# How long a server thread waits for work before it ends.
DEFAULT_IDLE_S = 30.0

_Item = tuple[futures.Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None


class ElasticThreadPool(futures.Executor):
    """Up to `max_workers` threads, started on demand; a thread idle for `idle_s` ends."""

    def __init__(self, max_workers: int, idle_s: float = DEFAULT_IDLE_S, name: str = "pool") -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._max, self._idle_s, self._name = max_workers, idle_s, name
        self._work: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # threads waiting for work and not yet promised to a submitted item
        self._pending = 0  # items submitted and not yet finished (waiting or running)
        self._shut = False

    @property
    def threads(self) -> int:
        with self._lock:
            return self._threads

    @property
    def load(self) -> int:
        """Items submitted and not finished: calls running or waiting for a thread."""
        return self._pending

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        future: futures.Future[Any] = futures.Future()
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot submit to a pool that was shut down")
            self._pending += 1
            self._work.put((future, fn, args, kwargs))
            if self._idle:
                self._idle -= 1
            elif self._threads < self._max:
                self._threads += 1
                threading.Thread(target=self._serve, name=f"{self._name}-{self._threads}", daemon=True).start()
        return future

    def _serve(self) -> None:
        while True:
            try:
                item = self._work.get(timeout=self._idle_s)
            except queue.Empty:
                with self._lock:
                    if self._idle:  # nobody promised this thread work: it ends
                        self._idle -= 1
                        self._threads -= 1
                        return
                continue  # promised to an item that is on its way
            if item is None:
                with self._lock:
                    self._threads -= 1
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as e:  # noqa: BLE001 - the future carries it to whoever waits
                    future.set_exception(e)
            del item, future, fn, args, kwargs
            with self._lock:
                self._pending -= 1
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shut = True
            threads = self._threads
        for _ in range(threads):
            self._work.put(None)

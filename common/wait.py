"""Waiting on a condition with a bound: the one polling loop of local stacks, benchmarks and tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
DEFAULT_POLL_S = 0.1


def wait_until(condition: Callable[[], T], timeout_s: float, poll_s: float = DEFAULT_POLL_S) -> T:
    """The condition's first truthy value, polled every poll_s; TimeoutError once timeout_s have passed."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while not (value := condition()):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"the condition did not hold within {timeout_s:g} s")
        pause.wait(poll_s)
    return value

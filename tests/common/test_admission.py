"""Compute slots go to waiting calls in arrival order, and a caller that leaves gives up its place (or the slot it
was handed as it left) to the next."""

from __future__ import annotations

import threading

import pytest

from common.admission import FifoSlots
from common.errors import AbandonedError
from common.wait import wait_until


def _waiter(slots: FifoSlots, name: str, served: list[str], gone: threading.Event) -> threading.Thread:
    def run() -> None:
        try:
            slots.acquire(gone.is_set)
        except AbandonedError:
            served.append(f"{name} left")
            return
        served.append(name)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _waiting(slots: FifoSlots) -> int:
    return len(slots._waiters)  # noqa: SLF001 - the line's length is what ordering is about


def test_waiters_are_served_in_arrival_order_and_one_that_left_is_skipped() -> None:
    slots, served = FifoSlots(1), []
    slots.acquire(lambda: False)  # the only slot is taken
    leaving = threading.Event()
    threads = []
    for name in ("first", "second", "third"):
        threads.append(_waiter(slots, name, served, leaving if name == "second" else threading.Event()))
        waiting = len(threads)
        wait_until(lambda: _waiting(slots) == waiting, 5)  # noqa: B023 - awaited before the next turn
    leaving.set()
    wait_until(lambda: served == ["second left"], 5)
    for expected in (["second left", "first"], ["second left", "first", "third"]):
        slots.release()
        wait_until(lambda e=expected: served == e, 5)
    slots.release()
    slots.acquire(lambda: False)  # the slot came back: no waiter holds it
    for t in threads:
        t.join(5)


def test_a_caller_that_leaves_never_takes_a_slot_with_it() -> None:
    slots = FifoSlots(1)
    slots.acquire(lambda: False)
    with pytest.raises(AbandonedError):
        slots.acquire(lambda: True)
    assert _waiting(slots) == 0
    slots.release()
    slots.acquire(lambda: False)

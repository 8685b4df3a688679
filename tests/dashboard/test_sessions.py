"""Dashboard sessions: an idle session ends, the store is bounded (least recently used first), CSRF compares."""

from __future__ import annotations

import pytest

from dashboard.sessions import Session, SessionStore


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def test_a_session_lives_while_used_and_ends_after_its_idle_time() -> None:
    clock = Clock()
    store = SessionStore(idle_s=60, clock=clock)
    s = store.create("tok", "alice", "vision", "submitter")
    clock.now_s += 59
    assert store.get(s.session_id) is s, "a request within the idle time keeps the session"
    clock.now_s += 59
    assert store.get(s.session_id) is s, "each request restarts the idle time"
    clock.now_s += 61
    assert store.get(s.session_id) is None and len(store) == 0
    assert store.get("made-up") is None


def test_the_store_keeps_at_most_its_cap_dropping_the_least_recently_used() -> None:
    store = SessionStore(max_sessions=3, clock=Clock())
    first, second, third = (store.create(f"t{i}", f"p{i}", "t", "viewer") for i in range(3))
    assert store.get(first.session_id) is first  # first is now the most recently used
    fourth = store.create("t4", "p4", "t", "viewer")
    assert len(store) == 3
    assert store.get(second.session_id) is None, "the least recently used session goes first"
    assert all(store.get(s.session_id) is s for s in (first, third, fourth))


def test_logout_ends_the_session_and_ids_and_csrf_tokens_are_unguessable() -> None:
    store = SessionStore()
    a, b = store.create("t", "p", "t", "admin"), store.create("t", "p", "t", "admin")
    assert a.session_id != b.session_id and a.csrf != b.csrf and len(a.session_id) >= 40
    store.end(a.session_id)
    assert store.get(a.session_id) is None and store.get(b.session_id) is b


@pytest.mark.parametrize(("role", "acts"), [("viewer", False), ("submitter", True), ("admin", True)])
def test_only_submitters_and_admins_are_offered_actions(role: str, acts: bool) -> None:
    assert Session("id", "t", "p", "team", role, 0.0).can_act is acts


def test_csrf_accepts_only_the_sessions_own_token() -> None:
    s = Session("id", "t", "p", "team", "submitter", 0.0)
    assert s.csrf_ok(s.csrf)
    assert not s.csrf_ok("") and not s.csrf_ok(s.csrf + "x") and not s.csrf_ok(s.csrf[:-1])


def test_one_principals_logins_evict_its_own_sessions_first() -> None:
    store = SessionStore(max_sessions=10, clock=Clock(), max_per_principal=3)
    others = [store.create(f"t{i}", f"person-{i}", "t", "viewer") for i in range(5)]
    flood = [store.create("vic-token", "vic", "vision", "viewer") for _ in range(1000)]
    assert all(store.get(s.session_id) is s for s in others), "a flood of one principal's logins kept others' sessions"
    assert [store.get(s.session_id) is s for s in flood[-4:]] == [False, True, True, True], "its newest 3 live"
    assert len(store) == 8

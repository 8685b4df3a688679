"""Who is logged in. A session is created by a login with a token the executor knows (WhoAmI) and lives in this
process's memory, found by a random id in an HttpOnly, SameSite=Strict cookie; the token never reaches the
browser. Each session has its own CSRF token, which every form that changes something carries back. Sessions end
after SESSION_IDLE_S without a request, at logout, or when the process restarts (people log in again); at most
MAX_SESSIONS are kept (the least recently used goes first), so logins cannot grow the process without bound, and
at most MAX_SESSIONS_PER_PRINCIPAL of one principal (its own least recently used goes first), so that one caller's
logins cannot push every other user's session out."""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

SESSION_COOKIE = "tunefleet_session"
# A working day without a request ends a session.
SESSION_IDLE_S = 8 * 3600.0
MAX_SESSIONS = 10_000
# A person's browsers and devices, a few tabs' logins each.
MAX_SESSIONS_PER_PRINCIPAL = 20
# Roles that may cancel and submit (common.identity's ranks: viewer < submitter < admin).
ACTING_ROLES = frozenset({"submitter", "admin"})


@dataclass
class Session:
    session_id: str
    token: str
    principal: str
    team: str
    role: str
    last_seen_s: float
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    @property
    def can_act(self) -> bool:
        """May cancel and submit (the executor enforces it again on every call)."""
        return self.role in ACTING_ROLES

    def csrf_ok(self, submitted: str) -> bool:
        return bool(submitted) and hmac.compare_digest(submitted.encode(), self.csrf.encode())


class SessionStore:
    def __init__(self, idle_s: float = SESSION_IDLE_S, max_sessions: int = MAX_SESSIONS,
                 clock: Callable[[], float] = time.monotonic,
                 max_per_principal: int = MAX_SESSIONS_PER_PRINCIPAL) -> None:
        self._idle_s = idle_s
        self._max = max_sessions
        self._max_per_principal = max_per_principal
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def create(self, token: str, principal: str, team: str, role: str) -> Session:
        session = Session(secrets.token_urlsafe(32), token, principal, team, role, self._clock())
        with self._lock:
            own = [sid for sid, s in self._sessions.items() if s.principal == principal]  # least recent first
            for sid in own[:max(0, len(own) + 1 - self._max_per_principal)]:
                del self._sessions[sid]
            self._sessions[session.session_id] = session
            while len(self._sessions) > self._max:
                self._sessions.popitem(last=False)
        return session

    def get(self, session_id: str) -> Session | None:
        """The live session with this id (and it is seen now), or None."""
        now = self._clock()
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return None
            if now - session.last_seen_s > self._idle_s:
                del self._sessions[session_id]
                return None
            session.last_seen_s = now
            self._sessions.move_to_end(session_id)
            return session

    def end(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._sessions)

"""What keeps slow or half-open clients from taking the dashboard down (a slowloris): a deadline for receiving each
whole request, a cap on open connections, and a log that says a flood once instead of once per connection.

uvicorn has no request-receipt timeout of its own: its keep-alive timer is reset by every byte received, so a client
trickling a header a byte at a time holds its connection for ever (uvicorn issue #157; the same fix as
xorbitsai/inference#5213). The deadline covers receiving a request only (headers and body): it is disarmed once the
request is complete, so a long Server-Sent Events response is never cut."""

from __future__ import annotations

import asyncio
import logging
import resource

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from common.log import SampledFilter

# A browser sends a whole request in milliseconds; a proxy on a slow link in well under a second.
REQUEST_RECEIPT_S = 10.0
# Open connections past which uvicorn answers 503 (each holds a file descriptor; the dashboard's own streams are
# bounded by the executor's Watch limits).
MAX_CONNECTIONS = 2_000
# uvicorn's and asyncio's lines of one kind: at most one per this many seconds.
LOG_SAMPLE_S = 10.0
_RECEIVING = (h11.IDLE, h11.SEND_BODY)


class RequestDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request has not fully arrived within REQUEST_RECEIPT_S of
    the connection (or of the previous response)."""

    receipt_s = REQUEST_RECEIPT_S
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state not in _RECEIVING:
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state in _RECEIVING and not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.receipt_s, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self.conn.their_state in _RECEIVING and not self.transport.is_closing():
            self.logger.warning("Closed a connection whose request did not arrive within %g s", self.receipt_s)
            self.transport.close()


def deadline_protocol(receipt_s: float) -> type[RequestDeadlineProtocol]:
    """The protocol class uvicorn instantiates per connection, with this request-receipt deadline."""
    return type("RequestDeadlineProtocol", (RequestDeadlineProtocol,), {"receipt_s": receipt_s})


def sample_server_logs() -> None:
    """At most one line of each kind per LOG_SAMPLE_S from uvicorn and from asyncio's accept loop (which logs every
    failed accept when the process is out of file descriptors)."""
    sampled = SampledFilter(LOG_SAMPLE_S)
    for name in ("asyncio", "uvicorn", "uvicorn.error"):
        logging.getLogger(name).addFilter(sampled)


def raise_file_limit() -> int:
    """The process's open-file limit raised to what the system allows (its hard limit): the connection cap, not the
    default soft limit of 1,024, decides how many clients are served. Returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 65_536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            return wanted
        except (ValueError, OSError):
            return soft
    return soft

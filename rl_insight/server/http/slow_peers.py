"""Slow and idle peers cannot hold the server: a connection gets `header_timeout_s` to send a request's
headers and `body_timeout_s` to send its body, and at most `max_connections` are held at once.

uvicorn bounds a keep-alive connection's idle time between requests, but not the time a peer takes to send
one: without this, 400 sockets with unfinished headers are held forever by anyone who can reach the port,
before any token is checked, and ~20 k of them exhaust the process's descriptors. This is uvicorn's own
h11 protocol with three additions, passed as `uvicorn.Config(http=guarded_protocol(...))`:

* a connection past `max_connections` is closed as soon as it is accepted (its descriptor freed at once);
* while a request's headers are incomplete (a new connection, or the next request on a kept-alive one) a
  timer runs; when it fires the peer gets `408 Request Timeout` and the connection is closed;
* once the headers are in, the body must arrive within `body_timeout_s` (the route sees a disconnect).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("rl_insight.server.http.slow_peers")
_BODY = b"the request was not sent in time"


class _Counters:
    """What the guard did, for the server's own metrics (shared by every connection of one server)."""

    def __init__(self) -> None:
        self.header_timeouts = 0
        self.body_timeouts = 0
        self.refused = 0
        self.logged_at = -1e9


def guarded_protocol(header_timeout_s: float, body_timeout_s: float, max_connections: int,
                     counters: _Counters | None = None) -> type[H11Protocol]:
    stats = counters or _Counters()

    class GuardedH11Protocol(H11Protocol):
        counters = stats

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn's protocol narrows BaseTransport
            super().connection_made(transport)
            self._guard: asyncio.TimerHandle | None = None
            self._guarding: str | None = None
            if len(self.connections) > max_connections:
                stats.refused += 1
                now = self.loop.time()
                if now - stats.logged_at >= 10:  # one line per 10 s, with the count, not one per connection
                    log.warning(
                        "%d connections open (the limit is max_connections=%d): new ones are closed at once "
                        "(%d so far; the latest from %s)",
                        len(self.connections) - 1,
                        max_connections,
                        stats.refused,
                        self.client[0] if self.client else "?",
                    )
                    stats.logged_at = now
                transport.abort()
                return
            self._arm("headers")

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._follow()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._follow()

        def _follow(self) -> None:
            """Which timer the peer is under now: the request's headers, its body, or none (we are answering)."""
            if self.transport is None or self.transport.is_closing():
                return
            theirs = self.conn.their_state
            if theirs is h11.SEND_BODY:
                self._arm("body")
            elif theirs is h11.IDLE and self.conn.our_state is h11.IDLE and self.conn.trailing_data[0]:
                self._arm("headers")  # part of the next request's headers arrived: it must finish in time
            else:
                self._disarm()  # answering, or idle between requests (uvicorn's keep-alive timeout bounds that)

        def _arm(self, what: str) -> None:
            if self._guarding == what:
                return
            self._disarm()
            self._guarding = what
            delay = header_timeout_s if what == "headers" else body_timeout_s
            self._guard = self.loop.call_later(delay, self._expired, what)

        def _disarm(self) -> None:
            guard = getattr(self, "_guard", None)
            if guard is not None:
                guard.cancel()
            self._guard, self._guarding = None, None

        def _expired(self, what: str) -> None:
            self._guard, self._guarding = None, None
            if self.transport.is_closing():
                return
            if what == "headers":
                stats.header_timeouts += 1
                if self.conn.our_state is h11.IDLE:  # nothing sent on this request yet: say why it is closed
                    self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                                         b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_BODY), _BODY))
            else:
                stats.body_timeouts += 1
            self.transport.close()

    return GuardedH11Protocol


def counters_of(protocol: Any) -> _Counters | None:
    return getattr(protocol, "counters", None)

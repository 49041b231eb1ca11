"""Slow and idle peers cannot hold the server: a connection gets `header_timeout_s` to send a request's
headers and `body_timeout_s` to send its body, and at most `max_connections` are held at once.

uvicorn bounds a keep-alive connection's idle time between requests, but not the time a peer takes to send
one: without this, 400 sockets with unfinished headers are held forever by anyone who can reach the port,
before any token is checked, and ~20 k of them exhaust the process's descriptors. This is one of uvicorn's own
HTTP/1.1 protocols with three additions, passed as `uvicorn.Config(http=guarded_protocol(...))`:

* a connection past `max_connections` is closed as soon as it is accepted (its descriptor freed at once);
* while a request's headers are incomplete (a new connection, or the next request on a kept-alive one) a
  timer runs; when it fires the peer gets `408 Request Timeout` and the connection is closed;
* once the headers are in, the body must arrive within `body_timeout_s` (the route sees a disconnect).

The protocol is uvicorn's httptools one (llhttp, in C) where `httptools` is installed and its h11 one (pure
Python) otherwise (config `http_parser`; at a thousand clients the two measured within noise of each other,
bench/RESULTS.md, issue 24); the guard is the same on both, only how each tells where a request stands differs.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ...errors import ConfigError

log = logging.getLogger("rl_insight.server.http.slow_peers")
_BODY = b"the request was not sent in time"
_408 = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
        b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_BODY), _BODY))


class PeerGuardCounters:
    """What the guard did (shared by every connection of one server): `rl_insight_server_connections_closed_total`."""

    def __init__(self) -> None:
        self.header_timeouts = 0
        self.body_timeouts = 0
        self.refused = 0
        self.logged_at = -1e9


class _Guard:
    """The bound and the timers, whichever parser reads the requests. A protocol class mixes this in before
    uvicorn's, calls `_admit` once connected and `_arm` / `_disarm` as the request moves on, and says with
    `_between_requests` whether nothing of the current request has been answered yet. Both uvicorn protocols
    have the loop, transport, connections and client used here."""

    counters: PeerGuardCounters
    limits: tuple[float, float, int]  # header_timeout_s, body_timeout_s, max_connections
    _guard: asyncio.TimerHandle | None = None
    _guarding: str | None = None

    def _admit(self) -> bool:
        """False (and the connection aborted) past max_connections."""
        protocol = self._protocol()
        stats, max_connections = self.counters, self.limits[2]
        if len(protocol.connections) <= max_connections:
            self._arm("headers")
            return True
        stats.refused += 1
        now = protocol.loop.time()
        if now - stats.logged_at >= 10:  # one line per 10 s, with the count, not one per connection
            log.warning("%d connections open (the limit is max_connections=%d): new ones are closed at once "
                        "(%d so far; the latest from %s)", len(protocol.connections) - 1, max_connections,
                        stats.refused, protocol.client[0] if protocol.client else "?")
            stats.logged_at = now
        protocol.transport.abort()
        return False

    def _arm(self, what: str) -> None:
        if self._guarding == what:
            return
        self._disarm()
        self._guarding = what
        delay = self.limits[0] if what == "headers" else self.limits[1]
        self._guard = self._protocol().loop.call_later(delay, self._expired, what)

    def _disarm(self) -> None:
        if self._guard is not None:
            self._guard.cancel()
        self._guard, self._guarding = None, None

    def _expired(self, what: str) -> None:
        self._guard, self._guarding = None, None
        transport = self._protocol().transport
        if transport is None or transport.is_closing():
            return
        if what == "headers":
            self.counters.header_timeouts += 1
            if self._between_requests():  # nothing sent on this request yet: say why it is closed
                transport.write(_408)
        else:
            self.counters.body_timeouts += 1
        transport.close()

    def _protocol(self) -> Any:
        return self  # (uvicorn's half of the class: its attributes, as the type checker does not see them here)

    def _between_requests(self) -> bool:
        raise NotImplementedError


def _h11_protocol(counters: PeerGuardCounters, limits: tuple[float, float, int]) -> type:
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(_Guard, H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn's protocol narrows BaseTransport
            super().connection_made(transport)
            self._admit()

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

        def _between_requests(self) -> bool:
            return self.conn.our_state is h11.IDLE

    GuardedH11Protocol.counters, GuardedH11Protocol.limits = counters, limits
    return GuardedH11Protocol


def _httptools_protocol(counters: PeerGuardCounters, limits: tuple[float, float, int]) -> type:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(_Guard, HttpToolsProtocol):
        # llhttp calls back as a request moves on: its first byte, its headers complete, its body complete
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as above
            super().connection_made(transport)
            self._admit()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm("headers")

        def on_headers_complete(self) -> None:
            self._arm("body")  # (before uvicorn's: a refused upgrade or a bad header closes, which disarms)
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._disarm()  # answering, then idle (uvicorn's keep-alive timeout bounds that)

        def _between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

    GuardedHttpToolsProtocol.counters, GuardedHttpToolsProtocol.limits = counters, limits
    return GuardedHttpToolsProtocol


PARSERS = ("auto", "httptools", "h11")


def guarded_protocol(header_timeout_s: float, body_timeout_s: float, max_connections: int,
                     counters: PeerGuardCounters | None = None, parser: str = "auto") -> type:
    """uvicorn's HTTP/1.1 protocol under the guard. `parser` (the config's `http_parser`): "httptools", "h11", or
    "auto" (httptools where installed); ConfigError for another name or for httptools when it is not installed."""
    if parser not in PARSERS:
        raise ConfigError(f"http_parser {parser!r} is not one of {', '.join(PARSERS)}")
    limits, stats = (header_timeout_s, body_timeout_s, max_connections), counters or PeerGuardCounters()
    try:
        import httptools  # noqa: F401 - whether it imports is the question
    except ImportError:
        if parser == "httptools":
            raise ConfigError("http_parser 'httptools' needs the httptools package (pip install httptools), "
                              "or use 'h11'") from None
        parser = "h11"
    else:
        parser = "httptools" if parser == "auto" else parser
    return _httptools_protocol(stats, limits) if parser == "httptools" else _h11_protocol(stats, limits)

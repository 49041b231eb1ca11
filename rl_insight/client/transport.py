"""How the exporter reaches the server: a `Transport` (injectable, e.g. for tests or another
protocol) and the default keep-alive HTTP one.

Imported lazily by the exporter thread, so `import rl_insight` does not pay for http.client.
Proxies from the environment are deliberately not used: the server is inside the cluster and a
corporate proxy in `HTTP_PROXY` would only break or slow delivery.
"""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any, Callable, Protocol

from ..protocol.limits import HEADER_CLIENT
from .urls import ServerUrl


class Response:
    __slots__ = ("status", "body")

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body


class TransportError(Exception):
    """The request did not complete (connection refused, reset, timeout)."""


class Transport(Protocol):
    """Sends one request body (already encoded, maybe gzipped) to a route and returns the answer."""

    def post(self, route: str, body: bytes, headers: dict[str, str]) -> Response: ...

    def close(self) -> None: ...


class HttpTransport:
    def __init__(self, url: ServerUrl, token: str, timeout_s: float, user_agent: str, client_id: str = "") -> None:
        self._url = url
        self._timeout = timeout_s
        self._headers = {"Content-Type": "application/json", "User-Agent": user_agent}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        if client_id:  # what a load balancer hashes on to keep this process on one server (docs/scale.md)
            self._headers[HEADER_CLIENT] = client_id
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            u = self._url
            cls = http.client.HTTPSConnection if u.https else http.client.HTTPConnection
            conn = cls(u.host, u.port, timeout=self._timeout)
            conn.connect()
            # Small request/response pairs on a keep-alive connection: Nagle + delayed ACK would add 40 ms.
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._conn = conn
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def post(self, route: str, body: bytes, headers: dict[str, str]) -> Response:
        all_headers = {**self._headers, **headers}
        # One retry on a stale keep-alive connection; real failures surface as TransportError.
        for attempt in (0, 1):
            try:
                conn = self._connection()
                conn.request("POST", self._url.prefix + route, body=body, headers=all_headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (OSError, http.client.HTTPException, socket.timeout) as exc:
                self.close()
                if attempt == 0 and isinstance(
                    exc, (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)
                ):
                    continue
                raise TransportError(f"{type(exc).__name__}: {exc}") from exc
            try:
                parsed = json.loads(raw) if raw else {}
            except ValueError:
                parsed = {"detail": raw[:200].decode("utf-8", "replace")}
            if not isinstance(parsed, dict):
                parsed = {"detail": parsed}
            if resp.getheader("Connection", "").lower() == "close":
                self.close()
            return Response(resp.status, parsed)
        raise TransportError("unreachable")


class FailoverTransport:
    """Several servers behind one Transport: requests go to the current one while it answers; a connection error
    or a 5xx moves to the next (each server tried at most once per request), and the process stays there. The
    exporter notices the move by the new server's boot id and resends what a new server lacks: every series'
    cumulative total and the open states (client/delivery.py), so totals stay exact."""

    def __init__(self, urls: list[ServerUrl], make: Callable[[ServerUrl], Any]) -> None:
        self._urls = urls
        self._make = make
        self._transports: dict[int, Any] = {}
        self.index = 0
        self.moves = 0

    @property
    def current(self) -> ServerUrl:
        return self._urls[self.index]

    def post(self, route: str, body: bytes, headers: dict[str, str]) -> Response:
        last: Response | TransportError | None = None
        for _ in range(len(self._urls)):
            t = self._transports.get(self.index)
            if t is None:
                t = self._transports[self.index] = self._make(self.current)
            try:
                resp = t.post(route, body, headers)
                if resp.status < 500:
                    return resp
                last = resp
            except TransportError as exc:
                last = exc
            t.close()
            self.index = (self.index + 1) % len(self._urls)
            self.moves += 1
        if isinstance(last, Response):
            return last
        raise TransportError(f"no server answered ({', '.join(u.text for u in self._urls)}): {last}")

    def close(self) -> None:
        for t in self._transports.values():
            t.close()


def warm_up() -> None:
    """http.client parses response headers with the email package, which imports more of itself on
    first use: do that now (in init()) rather than on the first answer, mid-training."""
    import io

    http.client.parse_headers(
        io.BytesIO(b"Content-Type: application/json\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n")
    )

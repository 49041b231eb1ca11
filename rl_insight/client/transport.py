"""HTTP transport for the exporter thread: gzip JSON over one keep-alive connection.

Imported lazily by the background thread, so `import rl_insight` does not pay for http.client.
Proxies from the environment are deliberately not used: the server is inside the cluster and a
corporate proxy in `HTTP_PROXY` would only break or slow delivery.
"""

from __future__ import annotations

import gzip
import http.client
import json
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit



@dataclass
class Response:
    status: int
    body: dict[str, Any]


class TransportError(Exception):
    """The request did not complete (connection refused, reset, timeout)."""


class HttpTransport:
    def __init__(self, base_url: str, token: str, timeout_s: float, user_agent: str) -> None:
        parts = urlsplit(base_url if "://" in base_url else "http://" + base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"RL-Insight server URL must look like http://host:port, got {base_url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._timeout = timeout_s
        self._headers = {"Content-Type": "application/json", "User-Agent": user_agent}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = cls(self._host, self._port, timeout=self._timeout)
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

    def post_json(self, path: str, payload: Any, compress: bool = True) -> Response:
        body = json.dumps(payload, separators=(",", ":"), default=str).encode()
        headers = dict(self._headers)
        if compress and len(body) > 1024:
            body = gzip.compress(body, compresslevel=1)
            headers["Content-Encoding"] = "gzip"
        # One retry on a stale keep-alive connection; real failures surface as TransportError.
        for attempt in (0, 1):
            try:
                conn = self._connection()
                conn.request("POST", self._prefix + path, body=body, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (OSError, http.client.HTTPException, socket.timeout) as exc:
                self.close()
                if attempt == 0 and isinstance(exc, (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)):
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

"""A real HTTP forwarder for the tests that need one between clients and servers: every request goes, byte for
byte, to each target in turn, and the client gets the first target's answer (`statuses` records them all); while
`broken` it answers 503 itself (the server behind it stays up; the way to it does not)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

HOP_BY_HOP = ("content-length", "transfer-encoding", "content-encoding", "connection")


class Forwarder:
    def __init__(self, *targets: str) -> None:
        forwarder = self
        self.broken = False
        self.statuses: list[tuple[str, ...]] = []  # (path, each target's status)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if forwarder.broken:
                    self._answer(503, {"Content-Type": "application/json"}, b'{"detail": "unavailable"}')
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                answers = [httpx.request(method, base + self.path, content=body, headers=headers, timeout=30)
                           for base in targets]
                forwarder.statuses.append((self.path, *(a.status_code for a in answers)))
                out = answers[0]
                self._answer(out.status_code, {k: v for k, v in out.headers.items() if k.lower() not in HOP_BY_HOP},
                             out.content)

            def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                self._forward("POST")

            def do_GET(self) -> None:
                self._forward("GET")

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

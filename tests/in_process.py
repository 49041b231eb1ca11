"""A server's app served in the test's own process, at a URL, with no socket (Starlette's TestClient transport).

A test talks to an in-process server as to any other: `httpx.get(srv.url + "/healthz")`, an `httpx.Client`, the
CLI's HTTP calls. While the server is up, httpx's transport hands each request for its address to the app through
the TestClient's transport (the request parsed and answered by the same ASGI app, middleware and lifespan as under
uvicorn; the peer address is the loopback, as a local client's is). Nothing listens on the port, so what does not
speak through httpx (the stdlib client of `rl_insight`, a browser, uvicorn's own protocol guards) needs a real
server: `start_server(..., in_process=False)`, or the `server` fixture of a test marked `socket`.

Invariant: a request reaches an in-process server only through this table; a stopped server's address is gone
from it (a request then fails to connect, as it would to a stopped server).
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
from starlette.testclient import TestClient

_SERVED: dict[str, TestClient] = {}  # "127.0.0.1:PORT" -> the running app's client
_lock = threading.Lock()
_real_handle_request = httpx.HTTPTransport.handle_request


def _handle_request(self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
    client = _SERVED.get(request.url.netloc.decode("ascii"))
    if client is None:
        return _real_handle_request(self, request)
    answer = client._transport.handle_request(request)  # (the TestClient's own transport: the app, in process)
    try:  # its body whole now, as sent (still encoded): the caller may read it after the server stopped
        body = b"".join(answer.iter_raw())
    finally:
        answer.close()
    return httpx.Response(answer.status_code, headers=answer.headers, stream=httpx.ByteStream(body),
                          request=request)


httpx.HTTPTransport.handle_request = _handle_request  # type: ignore[method-assign]


class InProcessApp:
    """`app` running (its lifespan entered) and answering at http://127.0.0.1:`port` until `stop()`."""

    def __init__(self, app: Any, port: int) -> None:
        self.netloc = f"127.0.0.1:{port}"
        self.client = TestClient(app, base_url=f"http://{self.netloc}", raise_server_exceptions=False,
                                 client=("127.0.0.1", 50000))
        self.client.__enter__()
        with _lock:
            _SERVED[self.netloc] = self.client

    def stop(self) -> None:
        with _lock:
            if _SERVED.get(self.netloc) is not self.client:
                return
            del _SERVED[self.netloc]
        self.client.__exit__(None, None, None)

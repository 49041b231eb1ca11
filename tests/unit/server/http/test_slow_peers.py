"""Slow and idle peers under the guard, on both HTTP parsers uvicorn offers (httptools where installed, h11
otherwise): unfinished headers are answered 408 and closed, a body that stops arriving is cut, connections past
the bound are closed at once, and a peer that sends in time is never touched. A real uvicorn server on a
loopback socket, raw sockets as the peers."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from rl_insight.errors import ConfigError
from rl_insight.server.http.net import bind_socket
from rl_insight.server.http.slow_peers import PeerGuardCounters, guarded_protocol
from tests.conftest import free_port, wait_until

HEADER_S, BODY_S = 0.6, 0.6


async def echo_size(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    size = 0
    while True:
        m = await receive()
        if m["type"] == "http.disconnect":
            return
        size += len(m.get("body", b""))
        if not m.get("more_body"):
            break
    body = str(size).encode()
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(params=["h11", "httptools"])
def guarded(request: pytest.FixtureRequest) -> Iterator[tuple[int, PeerGuardCounters]]:
    counters = PeerGuardCounters()
    protocol = guarded_protocol(HEADER_S, BODY_S, 8, counters=counters, parser=request.param)
    assert protocol.__name__ == {"h11": "GuardedH11Protocol", "httptools": "GuardedHttpToolsProtocol"}[request.param]
    sock = bind_socket("127.0.0.1", free_port())
    server = uvicorn.Server(uvicorn.Config(echo_size, http=protocol, log_level="error", timeout_keep_alive=30))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=10, what="uvicorn")
    try:
        yield sock.getsockname()[1], counters
    finally:
        server.should_exit = True
        thread.join(10)


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _answer(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or 5 s pass)."""
    out = b""
    try:
        while chunk := s.recv(4096):
            out += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return out


def _one_answer(s: socket.socket) -> bytes:
    """One whole answer on a kept-alive connection: its headers, then its content-length's bytes (the server writes
    the two apart, and a loaded machine delivers them in two reads)."""
    out = b""
    while b"\r\n\r\n" not in out:
        chunk = s.recv(4096)
        if not chunk:
            return out
        out += chunk
    head, _, body = out.partition(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length and (chunk := s.recv(4096)):
        body += chunk
    return head + b"\r\n\r\n" + body


def _request(body: bytes = b"abc") -> bytes:
    return b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def test_unfinished_headers_are_answered_408_and_closed(guarded: tuple[int, PeerGuardCounters]) -> None:
    port, counters = guarded
    s = _connect(port)
    s.sendall(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Le")
    started = time.monotonic()
    answer = _answer(s)
    assert answer.startswith(b"HTTP/1.1 408") and b"not sent in time" in answer
    assert HEADER_S * 0.9 <= time.monotonic() - started < 5
    assert counters.header_timeouts == 1 and counters.body_timeouts == 0


def test_a_silent_new_connection_is_closed_after_the_header_timeout(guarded: tuple[int, PeerGuardCounters]) -> None:
    port, counters = guarded
    answer = _answer(_connect(port))
    assert answer.startswith(b"HTTP/1.1 408") and counters.header_timeouts == 1


def test_a_body_that_stops_arriving_is_cut(guarded: tuple[int, PeerGuardCounters]) -> None:
    port, counters = guarded
    s = _connect(port)
    s.sendall(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
    assert not _answer(s).startswith(b"HTTP/1.1 200")  # closed, never answered as if whole
    assert counters.body_timeouts == 1 and counters.header_timeouts == 0


def test_in_time_requests_on_a_kept_alive_connection_are_untouched(guarded: tuple[int, PeerGuardCounters]) -> None:
    port, counters = guarded
    s = _connect(port)
    for body in (b"a" * 10, b"b" * 1000):
        s.sendall(_request(body))
        got = _one_answer(s)
        assert got.startswith(b"HTTP/1.1 200") and got.endswith(str(len(body)).encode())
        time.sleep(HEADER_S * 1.5)  # idle between requests longer than the header timeout: that is keep-alive's
    # the next request's headers arrive in two parts, slower than a packet but within the timeout
    s.sendall(b"POST /x HTTP/1.1\r\nHost: h\r\n")
    time.sleep(HEADER_S / 3)
    s.sendall(b"Content-Length: 2\r\n\r\nok")
    assert _one_answer(s).startswith(b"HTTP/1.1 200")
    # ... and the one after that never finishes its headers: 408 on the same connection
    s.sendall(b"GET /x HTTP/1.1\r\nHo")
    assert _answer(s).startswith(b"HTTP/1.1 408")
    assert counters.header_timeouts == 1 and counters.body_timeouts == 0


def test_connections_past_the_bound_are_closed_at_once(guarded: tuple[int, PeerGuardCounters]) -> None:
    port, counters = guarded
    held = [_connect(port) for _ in range(8)]
    wait_until(lambda: counters.refused == 0, timeout=2)
    extra = [_connect(port) for _ in range(4)]
    started = time.monotonic()
    assert all(_answer(s) == b"" for s in extra)  # closed without a word
    assert time.monotonic() - started < HEADER_S  # at once, not at the header timeout
    assert counters.refused == 4
    for s in held + extra:
        s.close()


def test_an_unknown_parser_is_a_config_error_that_names_the_choices() -> None:
    with pytest.raises(ConfigError, match="http_parser 'picohttp' is not one of auto, httptools, h11"):
        guarded_protocol(1, 1, 1, parser="picohttp")
    assert guarded_protocol(1, 1, 1).__name__ == "GuardedHttpToolsProtocol"  # "auto", httptools being installed


@pytest.mark.parametrize(("key", "value", "says"), [
    ("http_parser", "fast", "http_parser 'fast' is not one of auto, httptools, h11"),
    ("event_loop", "trio", "event_loop 'trio' is not one of auto, asyncio, uvloop"),
])
def test_the_server_refuses_an_unknown_parser_or_loop_by_name(tmp_path, key: str, value: str, says: str) -> None:
    cfg = tmp_path / "server.json"
    cfg.write_text(json.dumps({"host": "127.0.0.1", "port": free_port(), "data_dir": str(tmp_path / "d"), key: value}))
    r = subprocess.run([sys.executable, "-m", "rl_insight.server", "--config", str(cfg)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and says in r.stderr and "Traceback" not in r.stderr, r.stderr

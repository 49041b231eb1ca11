"""The open-file limit fitted to max_connections (server/http/fd_limit.py), and the idle keep-alive the server runs
with (`keep_alive_s`): a server started under a soft limit of 256 descriptors holds 600 client connections at once,
a hard limit too low is one warning naming both numbers, and an idle connection lives `keep_alive_s`, no longer."""

from __future__ import annotations

import json
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import httpx

from rl_insight.protocol import CLIENT_HEARTBEAT_S
from rl_insight.server.config import ServerConfig
from rl_insight.server.http.fd_limit import RESERVE
from rl_insight.server.http.net import free_port
from tests.conftest import wait_until

_, HARD = resource.getrlimit(resource.RLIMIT_NOFILE)
# connections to ask for: the default where this machine's hard limit allows it (CI's may be lower than here)
CONNS = 2048 if HARD == resource.RLIM_INFINITY else min(2048, (HARD - RESERVE) // 2)


def _limited(soft: int, hard: int = HARD) -> Callable[[], None]:
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _fit_in_child(max_connections: int, soft: int, hard: int = HARD) -> tuple[int, list[int], str]:
    """fit_open_files in a process started under (soft, hard): what it returned, the limits after, its log."""
    code = ("import json, logging, resource, sys; logging.basicConfig(stream=sys.stderr)\n"
            "from rl_insight.server.http.fd_limit import fit_open_files\n"
            f"room = fit_open_files({max_connections})\n"
            "print(json.dumps([room, list(resource.getrlimit(resource.RLIMIT_NOFILE))]))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       preexec_fn=_limited(soft, hard))
    assert r.returncode == 0, r.stderr
    room, limits = json.loads(r.stdout)
    return room, limits, r.stderr


def test_a_low_soft_limit_is_raised_to_fit_the_connections() -> None:
    room, limits, log = _fit_in_child(CONNS, soft=256)
    assert room == CONNS and limits == [CONNS + RESERVE, HARD] and log == ""


def test_a_soft_limit_that_fits_is_left_as_it_is() -> None:
    room, limits, _ = _fit_in_child(100, soft=1024)
    assert room == 100 and limits == [1024, HARD]  # never lowered to the 356 it needs


def test_a_hard_limit_too_low_is_one_warning_naming_both_numbers() -> None:
    room, limits, log = _fit_in_child(2048, soft=256, hard=600)
    assert room == 600 - RESERVE and limits == [600, 600]
    assert log.count("WARNING") == 1 and "open-file limit (600, hard limit 600)" in log
    assert f"room for {600 - RESERVE} client connections, not max_connections 2048" in log


def _server(tmp_path: Path, soft: int = 1024, **config: object) -> tuple[str, subprocess.Popen]:
    port = free_port()
    cfg = tmp_path / "server.json"
    cfg.write_text(json.dumps({"host": "127.0.0.1", "port": port, "data_dir": str(tmp_path / "data"),
                               "store_enabled": False, **config}))
    proc = subprocess.Popen([sys.executable, "-m", "rl_insight.server", "--config", str(cfg), "--log-level", "error"],
                            preexec_fn=_limited(soft), stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        try:
            return httpx.get(url + "/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, timeout=30, what="server")
    return url, proc


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(30)


def _request(sock: socket.socket, port: int) -> bytes:
    """One GET /healthz on a kept-alive socket; the whole answer (its headers and Content-Length of body)."""
    sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536) or b"<closed>"
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(65536) or b"<closed>"
    return data


def test_a_server_started_under_a_low_soft_limit_holds_more_connections_than_it(tmp_path: Path) -> None:
    assert CONNS >= 700, f"this machine's hard open-file limit ({HARD}) is too low for the test"
    url, proc = _server(tmp_path, soft=256, max_connections=700)
    port = int(url.rsplit(":", 1)[1])
    socks: list[socket.socket] = []
    try:
        limits = Path(f"/proc/{proc.pid}/limits").read_text()
        line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
        assert int(line.split()[3]) == 700 + RESERVE, line
        for _ in range(600):  # all open at once, each kept alive: 600 descriptors past the start's 256
            s = socket.create_connection(("127.0.0.1", port), timeout=20)
            socks.append(s)
        answers = [_request(s, port) for s in socks]
        assert all(a.startswith(b"HTTP/1.1 200") for a in answers), {a[:40] for a in answers}
    finally:
        for s in socks:
            s.close()
        _stop(proc)


def test_an_idle_connection_lives_keep_alive_s(tmp_path: Path) -> None:
    assert ServerConfig().keep_alive_s > CLIENT_HEARTBEAT_S  # an idle client's heartbeat reuses its connection
    url, proc = _server(tmp_path, keep_alive_s=2.0)
    port = int(url.rsplit(":", 1)[1])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            assert _request(s, port).startswith(b"HTTP/1.1 200")
            time.sleep(1.0)
            assert _request(s, port).startswith(b"HTTP/1.1 200")  # within keep_alive_s: the same connection
            time.sleep(3.5)  # past it (and uvicorn's own 5 s would still be holding it)
            assert s.recv(1) == b""  # closed by the server
    finally:
        _stop(proc)


def test_a_keep_alive_that_is_not_positive_stops_the_start_naming_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "server.json"
    cfg.write_text(json.dumps({"host": "127.0.0.1", "port": free_port(), "data_dir": str(tmp_path / "d"),
                               "store_enabled": False, "keep_alive_s": 0}))
    r = subprocess.run([sys.executable, "-m", "rl_insight.server", "--config", str(cfg)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "keep_alive_s 0 must be a number of seconds above 0" in r.stderr

"""Shared fixtures: a real ingest server on a free loopback port, a capturing HTTP peer, Prometheus."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

import rl_insight
from rl_insight.server.config import ServerConfig
from tests import process_caches
from tests.full_lane import in_full_lane
from tests.in_process import InProcessApp
from tests.lanes import _in_process_only, classify, guard_active, heaviest_first, install_guard, seed_the_draws  # noqa: F401 - a fixture for all

process_caches.install()  # (before any app or client is built: tests/process_caches.py)


def _port_slice() -> range:
    """This test process's own ports: below the kernel's ephemeral range, one slice per pytest-xdist worker.

    A port from bind(0) is an ephemeral one: between its release here and the server's own bind, any outgoing
    connection on the machine (a test's HTTP client, the browser, another worker's) may take it as its source
    port, and the server then fails to start or, worse, the test talks to someone else's process. Below the
    ephemeral range only a listener takes a port, and each worker hands out its own."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    top = min(low, 32768) - 1
    if top < 13_000:  # an unusual kernel setting: leave it to bind(0)
        return range(0)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    size = (top - 11_000) // 4  # (from 11000: Chromium refuses 10080 and a few others below as unsafe ports)
    start = 11_000 + (index % 4) * size
    return range(start, start + size)


_PORTS = _port_slice()
_next_port = [int(time.time() * 1000) % max(1, len(_PORTS))]  # (a rerun soon after does not start on the same)
_port_lock = threading.Lock()


def free_port() -> int:
    """A loopback port that is free now, outside the ephemeral range, never the same twice in a row."""
    with _port_lock:
        for _ in range(len(_PORTS)):
            port = _PORTS[_next_port[0] % len(_PORTS)]
            _next_port[0] += 1
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:  # no slice, or all of it taken
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_unbound = [40_000]


def _unbound_port() -> int:
    """A port number for an in-process server's URL (nothing binds it), never the same twice in a process."""
    with _port_lock:
        _unbound[0] += 1
        return 20_000 + _unbound[0] % 40_000


def answers(url: str) -> bool:
    """Whether `url` answers 200 now (a server's /healthz, Prometheus' /-/ready): what a test waits for."""
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def answers_healthz(url: str) -> bool:
    """Whether a server (or the proxy before it) at `url` answers /healthz with 200 now."""
    import httpx

    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def wait_until(predicate: Any, timeout: float = 10.0, interval: float = 0.05, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value {last!r}")


@dataclass
class RunningServer:
    """A test's server: in process by default (tests/in_process.py: no socket, `server` and `thread` None), or
    under uvicorn on a loopback port."""

    url: str
    config: ServerConfig
    app: Any
    server: Any | None  # (uvicorn.Server when on a port)
    thread: threading.Thread | None
    in_process: InProcessApp | None = None

    def stop(self) -> None:
        """Until the server has shut down (its exporters closed, its store's writer drained): a test goes on to read
        what shutdown writes. The join used to give up after 10 s and go on silently (the likely cause of a W&B file
        read without its run record in one CI run); a server still running after 60 s now fails the test."""
        if self.in_process is not None:
            self.in_process.stop()
            return
        assert self.server is not None and self.thread is not None
        self.server.should_exit = True
        self.thread.join(60)
        assert not self.thread.is_alive(), f"the server at {self.url} was still shutting down 60 s after stop()"


# a test server runs its store's writer and its insight rounds on threads of the test's process (no child processes:
# the fast lane); a test of the child processes says so in its overrides, and the integration tests start real servers
IN_PROCESS = {"store_writer": "thread", "insights_worker": "thread"}


def start_server(tmp_path: Path, port: int | None = None, *, in_process: bool = False,
                 **overrides: Any) -> RunningServer:
    """A server on `tmp_path`'s data; `in_process`: its app answers its URL in this process, with no socket
    (tests/in_process.py), else uvicorn serves it on the loopback."""
    overrides = {"host": "127.0.0.1", **IN_PROCESS, **overrides}
    cfg = ServerConfig(port=port or (_unbound_port() if in_process else free_port()), data_dir=str(tmp_path / "data"),
                       **overrides)
    import uvicorn  # (here: pytest-xdist's controller and tests without a server never load the server)

    from rl_insight.server.app import create_app

    app = create_app(cfg)
    if in_process:
        return RunningServer(f"http://127.0.0.1:{cfg.port}", cfg, app, None, None, InProcessApp(app, cfg.port))
    server = uvicorn.Server(uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level="warning", access_log=False))
    if ":" in cfg.host:  # an IPv6 host: the socket as `python -m rl_insight.server` binds it (dual-stack on `::`)
        from rl_insight.server.http.net import bind_socket

        sock = bind_socket(cfg.host, cfg.port)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    else:
        thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{cfg.port}"
    wait_until(lambda: server.started, what="uvicorn start")
    return RunningServer(url, cfg, app, server, thread)


def _on_a_port(request: pytest.FixtureRequest) -> bool:
    """A test marked `socket` (tests/lanes.py: by hand, or from what it names) gets its server under uvicorn on a
    loopback port — for the `rl_insight` client library (the stdlib, not httpx), a browser, a child process; any
    other, in this process (tests/in_process.py)."""
    return request.node.get_closest_marker("socket") is not None


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    srv = start_server(tmp_path, in_process=not _on_a_port(request))
    yield srv
    srv.stop()


@dataclass(frozen=True)
class DemoPair:
    """The same demo job twice on one token server, the second with `--fault slow-replica` from step 2 (issue 25) and
    dynamic sampling that filters a quarter of the groups it draws (`--filter-share 0.25`: the token ledger)."""

    url: str
    token: str
    base: int
    slow: int
    slow_lane: str


DEMO_PAIR_REPLICAS = 4


@pytest.fixture(scope="session")
def demo_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoPair]:
    """Shared by the API, CLI and Chromium tests of the diff and the critical path: made once per session."""
    import subprocess
    import sys

    token = "demo-pair-token"
    srv = start_server(tmp_path_factory.mktemp("demo-pair"), token=token)
    try:
        for name, extra in (("base", ()), ("slow", ("--fault", "slow-replica", "--fault-step", "2",
                                                       "--filter-share", "0.25"))):
            r = subprocess.run([sys.executable, "-m", "rl_insight", "demo", "--server-url", srv.url, "--token", token,
                                "--steps", "7", "--step-seconds", "0.6", "--replicas", str(DEMO_PAIR_REPLICAS),
                                "--ranks", "2", "--experiment-name", name, *extra],
                               capture_output=True, text=True, timeout=180)
            assert r.returncode == 0, r.stdout + r.stderr
        runs = httpx.get(srv.url + "/api/v1/runs", headers={"Authorization": f"Bearer {token}"}).json()["runs"]
        ids = {r["experiment_name"]: r["id"] for r in runs}
        yield DemoPair(srv.url, token, ids["base"], ids["slow"], f"replica_{DEMO_PAIR_REPLICAS - 1}")
    finally:
        srv.stop()


@pytest.fixture
def token_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    srv = start_server(tmp_path, token="s3cret-token", in_process=not _on_a_port(request))
    yield srv
    srv.stop()


@dataclass
class CaptureServer:
    """A real HTTP peer that records every decoded request body (for wire-format assertions)."""

    url: str
    httpd: ThreadingHTTPServer
    requests: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)
    status: int = 200
    boot_id: str = "boot-1"

    def batches(self) -> list[dict[str, Any]]:
        return [body for path, _, body in self.requests if path == "/api/v1/ingest"]


@pytest.fixture
def capture() -> Iterator[CaptureServer]:
    holder: dict[str, CaptureServer] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            cap = holder["cap"]
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                raw = gzip.decompress(raw)
            body = json.loads(raw)
            cap.requests.append((self.path, dict(self.headers), body))
            n = sum(len(body.get(k, [])) for k in ("samples", "span_starts", "spans"))
            out = json.dumps({"accepted": n, "rejected": 0, "errors": [], "boot_id": cap.boot_id}).encode()
            self.send_response(cap.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    cap = holder["cap"] = CaptureServer(f"http://127.0.0.1:{httpd.server_address[1]}", httpd)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield cap
    rl_insight.finish(timeout=2)  # deliver to this peer before it goes away
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(autouse=True)
def _client_isolation(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with monitoring off and fast flushing, and ends with it off again."""
    for var in ("RL_INSIGHT_SERVER_URL", "RL_INSIGHT_TOKEN", "RL_INSIGHT_STEP_METRIC", "RL_INSIGHT_QUEUE_SIZE",
                "RL_INSIGHT_PROJECT", "RL_INSIGHT_EXPERIMENT_NAME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RL_INSIGHT_FLUSH_INTERVAL", "0.05")
    rl_insight.finish(timeout=0)
    yield
    rl_insight.finish(timeout=0.5)
    from rl_insight.client import api

    reg, api._reg_only = api._reg_only, None  # a registration-only sender (update_prometheus_config before init)
    if reg is not None:
        reg.shutdown(0.5)
        reg.report_undelivered()


def debian_binary(name: str, package: str, where: str = "/usr/bin") -> str:
    """A real binary from a Debian package the tests run; CI installs it (.ci/run), so a missing one fails there
    and is skipped elsewhere."""
    path = shutil.which(name) or (f"{where}/{name}" if os.path.exists(f"{where}/{name}") else None)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} binary missing in CI; .ci/run must install Debian's {package} package")
        pytest.skip(f"{name} not installed (apt-get install {package})")
    return path


def prometheus_binary() -> str:
    """The real Prometheus (Debian's package)."""
    return debian_binary("prometheus", "prometheus")


def prom_query(prom_url: str, query: str) -> list[dict[str, Any]]:
    try:
        r = httpx.get(prom_url + "/api/v1/query", params={"query": query}, timeout=5, trust_env=False)
        return r.json()["data"]["result"] if r.status_code == 200 else []
    except httpx.HTTPError:
        return []


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Any]:
    """A throwaway PostgreSQL 15 cluster (tests/pg_cluster.py); CI installs Debian's postgresql-15, so a missing one
    fails there."""
    from tests.pg_cluster import PostgresCluster, postgres_bin_dir

    if postgres_bin_dir() is None:
        if os.environ.get("CI"):
            pytest.fail("postgresql-15 missing in CI; .ci/run must install Debian's postgresql-15 package")
        pytest.skip("PostgreSQL not installed (apt-get install postgresql-15)")
    cluster = PostgresCluster()
    cluster.wait_ready()
    yield cluster
    cluster.stop()


@pytest.fixture
def postgres_url(postgres_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh, empty database's store URL; its password in RL_INSIGHT_STORE_PASSWORD, as a deployment sets it."""
    from tests.pg_cluster import PASSWORD

    monkeypatch.setenv("RL_INSIGHT_STORE_PASSWORD", PASSWORD)
    return str(postgres_cluster.url(postgres_cluster.create_database()))


# ------------------------------------------------------------------ lanes (tests/lanes.py)
def pytest_configure(config: pytest.Config) -> None:
    if guard_active():
        seed_the_draws()
    if guard_active() and (hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)):
        install_guard()  # (in the processes that run tests; pytest-xdist's controller starts them)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    classify(items)
    for item in items:
        if in_full_lane(item.nodeid):
            item.add_marker(pytest.mark.full)
    heaviest_first(items)

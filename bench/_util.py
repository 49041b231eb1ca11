"""Helpers for the benchmarks: start a real ingest server subprocess, a null HTTP sink, machine info."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )


class IngestServer:
    """`python -m rl_insight.server` on a free loopback port, as the supervisor runs it."""

    def __init__(self, store: bool = True, data_dir: str | None = None, code: str | None = None,
                 **extra: object) -> None:
        """`code`: a checkout whose rl_insight runs (a side-by-side "before"), else the installed one."""
        self.dir = data_dir or tempfile.mkdtemp(prefix="rl-bench-")
        self.port = free_port()
        cfg = Path(self.dir) / "server.json"
        cfg.write_text(
            json.dumps(
                {
                    "host": "127.0.0.1",
                    "port": self.port,
                    "data_dir": self.dir,
                    "store_enabled": store,
                    **({"store": extra.pop("store_url")} if "store_url" in extra else {}),
                    **{k: (str(Path(self.dir) / v) if k == "export_tensorboard" else v) for k, v in extra.items()},
                }
            )
        )
        env = {**os.environ, "PYTHONPATH": code} if code else None
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rl_insight.server", "--config", str(cfg), "--log-level", "warning"], env=env,
            cwd=code or None,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("ingest server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)  # the server writes what its run store queue still holds before it exits


class NullSink:
    """Accepts ingest batches and answers like the server without storing anything (isolates the client)."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else headers and body are 40 ms apart (Nagle + delayed ACK)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = b'{"accepted":0,"rejected":0,"errors":[],"boot_id":"sink"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def timed(fn, runs: int = 3) -> tuple[float, object]:
    """Median wall time of `runs` calls, and the last result."""
    import statistics

    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def time_requests(client, requests: dict, rounds: int, check=None) -> None:
    """GET each of `requests` ({label: (path, params)}) once per round, interleaved, and print each one's median
    time and answer size; `check(label, body)` asserts what the answer must say (e.g. nothing pending)."""
    import statistics

    times: dict[str, list[float]] = {k: [] for k in requests}
    sizes: dict[str, int] = {}
    for _ in range(rounds):
        for label, (url, params) in requests.items():
            t = time.perf_counter()
            r = client.get(url, params=params)
            r.raise_for_status()
            body = r.json()
            times[label].append(time.perf_counter() - t)
            sizes[label] = len(r.content)
            if check is not None:
                check(label, body)
    for label, ts in times.items():
        print(f"  {label}: {statistics.median(ts) * 1000:.0f} ms (median of {len(ts)}), {sizes[label] / 1024:.0f} KiB")

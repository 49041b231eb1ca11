"""Fixtures that run the real stack through the CLI in a temporary home."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import free_port, prometheus_binary
from tests.unit.analysis.test_analysis import torch_traces  # noqa: F401 - a pytest fixture (real traces), found by name


@dataclass
class Stack:
    home: Path
    ingest_url: str
    prometheus_url: str
    token: str
    state: dict

    def ingest_pid(self) -> int:
        return next(s["pid"] for s in self.state_now()["services"] if s["name"] == "ingest")

    def state_now(self) -> dict:
        return json.loads((self.home / "run" / "stack.json").read_text())


def cli(home: Path, *args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "RL_INSIGHT_HOME": str(home), **(env or {})}
    return subprocess.run([sys.executable, "-m", "rl_insight", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def start_stack(home: Path, port: int | None = None, prom_port: int | None = None,
                alertmanager: bool = False) -> Stack:
    """The stack through `server start`, with Prometheus (scraping every second) and, when asked, Alertmanager."""
    prom = prometheus_binary()
    port = port or free_port()
    prom_port = prom_port or free_port()
    am = ("--alertmanager-port", str(free_port())) if alertmanager else ("--no-alertmanager",)
    r = cli(home, "server", "start", "--detach", "--host", "127.0.0.1", "--port", str(port),
            "--prometheus-port", str(prom_port), "--prometheus-bin", prom, "--scrape-interval", "1s",
            "--token", "integration-token", *am)
    assert r.returncode == 0, f"server start failed:\n{r.stdout}\n{r.stderr}"
    state = json.loads((home / "run" / "stack.json").read_text())
    return Stack(home, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{prom_port}", "integration-token", state)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = start_stack(tmp_path / "home")
    yield s
    r = cli(s.home, "server", "stop")
    assert r.returncode == 0, r.stderr


@pytest.fixture
def stop_home() -> Iterator[list[Path]]:
    """Homes registered here are stopped at teardown (for tests that start the stack themselves)."""
    homes: list[Path] = []
    yield homes
    for h in homes:
        cli(h, "server", "stop")

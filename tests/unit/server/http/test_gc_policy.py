"""The server's garbage collector policy (server/http/gc_policy.py), each case in a fresh interpreter (the collector
is process-wide): the start-up heap frozen and full collections rare under "server", a young cycle made afterwards
still freed without anyone calling gc.collect(), CPython's defaults under "python", an unknown policy refused by
name at the server's start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rl_insight.server.http.gc_policy import FULL_AFTER_YOUNG
from rl_insight.server.http.net import free_port

PROBE = """
import gc, json, sys, weakref
from rl_insight.server.app import create_app
from rl_insight.server.config import ServerConfig
from rl_insight.server.http.gc_policy import fit_collector
default = gc.get_threshold()
app = create_app(ServerConfig(host="127.0.0.1", port=1, data_dir=sys.argv[2], store_enabled=False))
after = fit_collector(sys.argv[1])

class Node:
    pass

a, b = Node(), Node()
a.peer, b.peer = b, a  # a cycle: only the collector frees it
gone = weakref.ref(a)
del a, b
held = []
for _ in range(200_000):  # objects that live a while, as a request's do: the young collections run on their own
    held.append([])
    if len(held) > 2_000:
        held.clear()
    if gone() is None:
        break
print(json.dumps({"default": default, "after": after, "frozen": gc.get_freeze_count(), "cycle_freed": gone() is None}))
"""


def _probe(policy: str, tmp_path: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", PROBE, policy, str(tmp_path)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_server_policy_freezes_the_start_up_heap_and_keeps_collecting_young_cycles(tmp_path: Path) -> None:
    seen = _probe("server", tmp_path)
    assert seen["frozen"] > 10_000  # the app's modules, routes and models: out of every later full collection
    assert seen["after"][:2] == seen["default"][:2]  # the young generations as CPython has them
    assert seen["after"][2] == FULL_AFTER_YOUNG != seen["default"][2]
    assert seen["cycle_freed"]  # nothing is disabled: garbage cycles made after the start are still freed


def test_python_policy_leaves_cpythons_collector_as_it_is(tmp_path: Path) -> None:
    seen = _probe("python", tmp_path)
    assert seen["frozen"] == 0 and seen["after"] == seen["default"] and seen["cycle_freed"]


def test_the_server_refuses_an_unknown_gc_policy_by_name(tmp_path: Path) -> None:
    cfg = tmp_path / "server.json"
    cfg.write_text(json.dumps({"host": "127.0.0.1", "port": free_port(), "data_dir": str(tmp_path / "d"),
                               "gc_policy": "off"}))
    r = subprocess.run([sys.executable, "-m", "rl_insight.server", "--config", str(cfg)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "gc_policy 'off' is not one of server, python" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("policy", ["server", "python"])
def test_a_server_starts_and_answers_under_either_policy(tmp_path: Path, policy: str) -> None:
    import httpx

    from tests.conftest import wait_until

    port = free_port()
    cfg = tmp_path / "server.json"
    cfg.write_text(json.dumps({"host": "127.0.0.1", "port": port, "data_dir": str(tmp_path / "d"),
                               "gc_policy": policy}))
    proc = subprocess.Popen([sys.executable, "-m", "rl_insight.server", "--config", str(cfg), "--log-level",
                             "warning"])
    try:
        def healthy() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, timeout=60)
    finally:
        proc.terminate()
        assert proc.wait(60) in (0, -15)  # uvicorn ends a SIGTERM'd server by raising the signal again

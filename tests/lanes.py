"""The test lanes by cost: which tests the fast lane (`python -m tests --fast`) runs, and the guard that keeps it
in process.

A test is marked, from where it lives and what it names (so a new test is classified by the same rules):
- `external`: it needs an outside binary or process (PostgreSQL, Prometheus, Chromium, haproxy, torch, a
  subprocess of rl-insight);
- `socket`: it opens a network socket or starts a process of its own (a server under uvicorn on a port, a
  capturing HTTP peer, a child process); its `server` fixture then listens on a port (tests/conftest.py), as does
  that of a test in a module that says why in `SERVER_ON_A_PORT` (the stdlib client library speaks no httpx).
The fast lane runs the rest: in process only. While it runs (RL_INSIGHT_TEST_LANE=in-process), the guard refuses
every TCP/UDP connect and bind and every process start, and fails the test that tried, naming what it did: a test
the rules above classify wrongly fails there, visibly, instead of slowing the lane down.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import multiprocessing.process
import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

LANE_ENV = "RL_INSIGHT_TEST_LANE"
IN_PROCESS_LANE = "in-process"

EXTERNAL_FOLDERS = ("integration", "e2e")
EXTERNAL_FIXTURES = {"postgres_cluster", "postgres_url", "demo_pair", "torch_traces"}
# a function that names one of these starts a real process or an outside binary (or imports torch)
PROCESS_NAMES = {"subprocess", "Popen", "executable", "prometheus_binary", "debian_binary", "PostgresCluster",
                 "WriterProcess", "InsightProcess", "PipeChild", "torch"}
# a function that names one of these opens a socket (a real server, a peer, a port) or starts a process
# a module that says why in `SERVER_ON_A_PORT` has its tests' servers (these fixtures) served on a port
SERVER_ON_A_PORT = "SERVER_ON_A_PORT"
SERVER_FIXTURES = {"server", "token_server"}
SOCKET_NAMES = {"free_port", "uvicorn", "ThreadingHTTPServer", "HTTPServer", "socket", "capture", "create_connection",
                "Process", "mp_context", "get_context", "fork", "spawn"}


def _references(func: ast.AST) -> set[str]:
    """The names, attributes and parameters `func` mentions (one walk: collection reads every test module)."""
    found: set[str] = set()
    for x in ast.walk(func):
        name = getattr(x, "id", None) or getattr(x, "attr", None) or (x.arg if isinstance(x, ast.arg) else None)
        if isinstance(name, str):
            found.add(name)
        elif _imports_by_name(x):  # pytest.importorskip("torch"): the module it imports, by its top name
            found.add(str(x.args[0].value).split(".")[0])  # type: ignore[attr-defined]
    return found


def _imports_by_name(x: ast.AST) -> bool:
    return (isinstance(x, ast.Call) and getattr(x.func, "attr", getattr(x.func, "id", None)) in
            ("importorskip", "import_module") and bool(x.args) and isinstance(x.args[0], ast.Constant)
            and isinstance(x.args[0].value, str))


def _starts_a_real_server(func: ast.AST) -> bool:
    """Whether `func` calls `start_server(...)` without `in_process=True` (uvicorn on a port)."""
    for call in ast.walk(func):
        if isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", None)) == "start_server":
            in_process = next((k.value for k in call.keywords if k.arg == "in_process"), None)
            if not (isinstance(in_process, ast.Constant) and in_process.value is True):
                return True
    return False


def _closure(refs: dict[str, set[str]], seeds: set[str]) -> frozenset[str]:
    """`seeds` and every function of the module that names one of them, transitively (a helper, a nested `cli()`,
    a module fixture)."""
    found = set(seeds)
    while True:
        more = {name for name, r in refs.items() if r & found} - found
        if not more:
            return frozenset(found)
        found |= more


@functools.lru_cache(maxsize=None)
def _functions(path: str) -> tuple[dict[str, set[str]], list[ast.AST]]:
    tree = ast.parse(Path(path).read_text())
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return {f.name: _references(f) for f in funcs}, funcs  # type: ignore[attr-defined]


def _process_starters(path: str) -> frozenset[str]:
    refs, _ = _functions(path)
    return _closure(refs, {name for name, r in refs.items() if r & PROCESS_NAMES})


def _socket_openers(path: str) -> frozenset[str]:
    refs, funcs = _functions(path)
    seeds = {name for name, r in refs.items() if r & SOCKET_NAMES}
    seeds |= {f.name for f in funcs if _starts_a_real_server(f)}  # type: ignore[attr-defined]
    return _closure(refs, seeds) | _process_starters(path)


CLASSIFIED = Path.home() / ".cache" / "rl-insight" / "lanes"  # a module's verdicts by its text and these rules
_RULES = hashlib.sha1(Path(__file__).read_bytes()).hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def _classified(path: str) -> tuple[frozenset[str], frozenset[str]]:
    """(process starters, socket openers) of a test module, kept on disk by the module's text and this file's: each
    pytest process (each xdist worker, each pass) read the modules' syntax trees again, 7 s of a 20 s collection."""
    key = hashlib.sha1(Path(path).read_bytes()).hexdigest()
    kept = CLASSIFIED / f"{_RULES}-{key}.json"
    try:
        starters, openers = json.loads(kept.read_text())
        return frozenset(starters), frozenset(openers)
    except (OSError, ValueError, TypeError):
        pass
    found = _process_starters(path), _socket_openers(path)
    try:
        CLASSIFIED.mkdir(parents=True, exist_ok=True)
        part = kept.with_suffix(f".{os.getpid()}.part")
        part.write_text(json.dumps([sorted(found[0]), sorted(found[1])]))
        part.replace(kept)  # (atomic: workers classify at once)
    except OSError:
        pass  # an unwritable home: computed again next time
    return found


def process_starters(path: str) -> frozenset[str]:
    """The functions of a test module that start a real process or outside binary, directly or through another."""
    return _classified(path)[0]


def socket_openers(path: str) -> frozenset[str]:
    """The functions of a test module that open a socket or start a process, directly or through another."""
    return _classified(path)[1]


def classify(items: list[pytest.Item]) -> None:
    for item in items:
        path = str(item.fspath)
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        fixtures = set(getattr(item, "fixturenames", ()))
        python = path.endswith(".py")
        starters = process_starters(path) if python else frozenset()
        openers = socket_openers(path) if python else frozenset()
        test_name = getattr(getattr(item, "function", None), "__name__", "")
        if (any(f in Path(path).parts for f in EXTERNAL_FOLDERS) or EXTERNAL_FIXTURES & fixtures
                or any(isinstance(v, str) and v == "postgresql" for v in params.values())
                or item.get_closest_marker("integration") or item.get_closest_marker("e2e")
                or test_name in starters or starters & fixtures):
            item.add_marker(pytest.mark.external)
        if (item.get_closest_marker("external") or test_name in openers or (openers | SOCKET_NAMES) & fixtures
                or (getattr(getattr(item, "module", None), SERVER_ON_A_PORT, None) and SERVER_FIXTURES & fixtures)):
            item.add_marker(pytest.mark.socket)


# ------------------------------------------------------------------ the guard
_NETWORK = (socket.AF_INET, socket.AF_INET6)
_tried: list[str] = []


def _refuse(what: str) -> None:
    _tried.append(what)
    raise PermissionError(f"the in-process test lane opens no socket and starts no process: {what}")


def install_guard() -> Callable[[], None]:
    """Refuse network sockets and processes in this (worker) process from now on; returns what undoes it."""
    real_connect, real_connect_ex, real_bind = socket.socket.connect, socket.socket.connect_ex, socket.socket.bind

    def connect(self: socket.socket, address: Any) -> None:
        if self.family in _NETWORK:
            _refuse(f"connect to {address!r}")
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if self.family in _NETWORK:
            _refuse(f"connect to {address!r}")
        return real_connect_ex(self, address)

    def bind(self: socket.socket, address: Any) -> None:
        if self.family in _NETWORK:
            _refuse(f"bind {address!r}")
        real_bind(self, address)

    def popen(self: subprocess.Popen, args: Any, *a: Any, **k: Any) -> None:
        _refuse(f"start {args!r}")

    def start(self: multiprocessing.process.BaseProcess) -> None:
        _refuse(f"start a process ({self.name})")

    real_popen, real_start = subprocess.Popen.__init__, multiprocessing.process.BaseProcess.start

    def undo() -> None:
        socket.socket.connect, socket.socket.connect_ex = real_connect, real_connect_ex  # type: ignore[method-assign]
        socket.socket.bind = real_bind  # type: ignore[method-assign]
        subprocess.Popen.__init__ = real_popen  # type: ignore[method-assign]
        multiprocessing.process.BaseProcess.start = real_start  # type: ignore[method-assign]

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
    socket.socket.bind = bind  # type: ignore[method-assign]
    subprocess.Popen.__init__ = popen  # type: ignore[method-assign]
    multiprocessing.process.BaseProcess.start = start  # type: ignore[method-assign]
    return undo


def guard_active() -> bool:
    return os.environ.get(LANE_ENV) == IN_PROCESS_LANE


def examples(full: int) -> int:
    """A property test's number of examples: `full` on the full suite, a fifth (at least 25) on the in-process lane,
    whose draws are also the same on every run (`seed_the_draws`)."""
    return max(25, full // 5) if guard_active() else full


def seed_the_draws() -> None:
    """Every hypothesis test on this lane draws the same examples each run (a test's own settings keep the rest)."""
    from hypothesis import settings

    settings.register_profile(IN_PROCESS_LANE, derandomize=True, database=None)
    settings.load_profile(IN_PROCESS_LANE)


@pytest.fixture(autouse=True)
def _in_process_only() -> Iterator[None]:
    """On the in-process lane: fails the test that opened a socket or started a process, even where the code it
    called swallowed the refusal (the client library never raises into training)."""
    _tried.clear()
    yield
    if _tried:
        what = "; ".join(dict.fromkeys(_tried))
        _tried.clear()
        pytest.fail(f"this test opened a socket or started a process on the in-process lane ({what}): give it "
                    f"a real server or child by a name tests/lanes.py knows (the mark `socket`, start_server without "
                    f"in_process=True, free_port, ...), or keep it in process")


# The modules that take longest in each pass of the standard run (test seconds on two cores, from `python -m tests
# --full --durations=0`, 2026-12-08, less the full lane's tests), then the full lane's longest: started first. A
# module missing here only starts later.
LONGEST_MODULES = (
    "tests/integration/test_profile_on_demand.py",  # 70 s
    "tests/unit/contract/test_compat.py",  # 47 s
    "tests/integration/test_demo_cli.py",  # 39 s
    "tests/unit/analysis/test_analysis.py",  # 38 s
    "tests/integration/test_services_cli.py",  # 38 s
    "tests/unit/contract/test_api_fuzz.py",  # 37 s (152 s with the full lane's)
    "tests/integration/test_stack.py",  # 35 s
    "tests/integration/test_alerting.py",  # 34 s (118 s)
    "tests/unit/server/routes/test_runs_api.py",  # 30 s
    "tests/integration/test_full_stack.py",  # 29 s (60 s)
    "tests/integration/test_flight_recorder_agreement.py",  # 28 s
    # the full lane's
    "tests/integration/test_container_image.py",  # 136 s
    "tests/integration/test_stack_snapshots.py",  # 138 s
    "tests/integration/test_fleet.py",  # 106 s
    # the browser pass (`-m "e2e or alone"`)
    "tests/e2e/test_ui.py",  # 107 s
    "tests/e2e/test_ui_charts.py",  # 82 s
    "tests/e2e/test_ui_stacks.py",  # 68 s
    "tests/e2e/test_ui_profiles.py",  # 63 s
    "tests/e2e/test_ui_trajectories.py",  # 45 s
    "tests/e2e/test_ui_prometheus.py",  # 45 s
)


def heaviest_first(items: list[Any]) -> None:
    """The longest modules first (LONGEST_MODULES), then those whose tests need outside binaries, then those that open
    sockets, then the in-process ones (a stable sort: a module's own order stays): pytest-xdist's workers start the
    long modules first and the short ones fill the end (in path order the container image and the schema fuzz began
    late and ran on alone for minutes)."""
    rank: dict[str, tuple[int, int]] = {m: (0, i) for i, m in enumerate(LONGEST_MODULES)}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        kind = 1 if item.get_closest_marker("external") else 2 if item.get_closest_marker("socket") else 3
        rank[module] = min(rank.get(module, (kind, 0)), (kind, 0))
    items.sort(key=lambda item: rank[item.nodeid.split("::", 1)[0]])

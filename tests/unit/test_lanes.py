"""The in-process lane (tests/lanes.py, tests/in_process.py): its guard refuses network sockets and processes and
names what was tried; an in-process server answers its URL through httpx with no socket, and is gone once stopped;
the rules mark a test by what it names."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import lanes
from tests.conftest import start_server

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def guarded() -> Iterator[list[str]]:
    undo = lanes.install_guard() if not lanes.guard_active() else (lambda: None)
    lanes._tried.clear()
    try:
        yield lanes._tried
    finally:
        undo()
        lanes._tried.clear()  # (what this test tried on purpose does not fail it)


def test_the_guard_refuses_network_sockets_and_processes_and_says_what(guarded: list[str]) -> None:
    with socket.socket() as s, pytest.raises(PermissionError, match="opens no socket"):
        s.connect(("127.0.0.1", 9))
    with socket.socket() as s, pytest.raises(PermissionError):
        s.bind(("127.0.0.1", 0))
    with pytest.raises(PermissionError, match="starts no process"):
        subprocess.Popen([sys.executable, "-c", "pass"])
    a, b = socket.socketpair()  # (a local pipe, as every event loop makes, is no network socket)
    a.close(), b.close()
    assert len(guarded) == 3 and "connect to ('127.0.0.1', 9)" in guarded[0]


def test_an_in_process_server_answers_its_url_without_a_socket(tmp_path: Path, guarded: list[str]) -> None:
    srv = start_server(tmp_path, in_process=True)
    try:
        assert httpx.get(srv.url + "/healthz").json()["status"] == "ok"
        with httpx.Client(base_url=srv.url) as client:
            assert client.get("/api/v1/runs").status_code == 200
    finally:
        srv.stop()
    assert guarded == []  # (nothing was opened)
    with pytest.raises((httpx.ConnectError, PermissionError)):
        httpx.get(srv.url + "/healthz")  # (stopped: gone from the table, and nothing listens)


def test_the_rules_mark_what_a_test_names() -> None:
    export = lanes.socket_openers(str(ROOT / "tests" / "unit" / "test_export.py"))
    assert "test_export_cli_for_runs_already_in_the_store" in export  # (start_server: on a port)
    this = lanes.socket_openers(__file__)
    assert "test_an_in_process_server_answers_its_url_without_a_socket" not in this  # (in_process=True)


class _Item:
    def __init__(self, nodeid: str, marks: tuple[str, ...] = ()) -> None:
        self.nodeid, self._marks = nodeid, marks

    def get_closest_marker(self, name: str) -> object:
        return name if name in self._marks else None


def test_the_longest_modules_start_first_and_each_module_stays_whole_in_its_order() -> None:
    longest = lanes.LONGEST_MODULES[1]
    a, b, c, d = (f"{folder}/{name}.py" for folder, name in
                  (("tests/unit", "a"), ("tests/unit", "b"), ("tests/integration", "c"), ("tests/unit", "d")))
    items = [_Item(f"{a}::t1"), _Item(f"{a}::t2", ("socket",)), _Item(f"{b}::t1"),
             _Item(f"{c}::t1", ("external", "socket")), _Item(f"{longest}::t1"), _Item(f"{longest}::t2"),
             _Item(f"{d}::t1", ("socket",))]
    lanes.heaviest_first(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [f"{longest}::t1", f"{longest}::t2", f"{c}::t1", f"{a}::t1", f"{a}::t2",
                                         f"{d}::t1", f"{b}::t1"]
    assert all((ROOT / m).is_file() for m in lanes.LONGEST_MODULES)

"""The client half of stack snapshots (rl_insight/client/control/stacks/answers.py): what a process says about its
threads, and that it answers each request once, only when selected."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

import pytest

import rl_insight
from rl_insight.client.control.stacks import answers as cs
from rl_insight.client.control.this_process import ThisProcess
from rl_insight.client.lanes import LaneTable
from rl_insight.protocol import RunControl, StackRequest, decode_stack_report


def parked_in_a_lane(ready: threading.Event, release: threading.Event) -> None:
    ready.set()
    release.wait(30)  # the line a snapshot must show


def test_capture_marks_the_thread_that_holds_each_lane() -> None:
    ready, release = threading.Event(), threading.Event()
    t = threading.Thread(target=parked_in_a_lane, args=(ready, release), name="rank-worker")
    t.start()
    ready.wait(5)
    holders = [("rank_3", "actor_update", 123, t.ident)]
    try:
        body = cs.capture(holders, 7, False, {"host": "h", "pid": os.getpid(), "rank": 3, "lanes": ["rank_3"],
                                              "roles": []})
    finally:
        release.set()
        t.join()
    rep = decode_stack_report(body)  # what a client sends passes the server's one validation
    worker = next(x for x in rep["threads"] if x["name"] == "rank-worker")
    assert rep["threads"][0] is worker  # lane holders first: they survive a cut list
    assert worker["lanes"] == [{"lane": "rank_3", "state": "actor_update", "since_ns": 123}]
    assert [f["func"] for f in worker["frames"][-3:]] == ["parked_in_a_lane", "Event.wait", "Condition.wait"]
    mine = next(f for f in worker["frames"] if f["func"] == "parked_in_a_lane")
    assert mine["code"] == "release.wait(30)  # the line a snapshot must show"
    me = next(x for x in rep["threads"] if x["sender"])
    assert me["id"] == threading.get_ident() and rep["step"] == 7 and rep["rss_bytes"] and rep["cpu_s"] is not None


def test_lane_table_records_the_opening_thread() -> None:
    table = LaneTable()

    class Exp:  # what a block reads of its delivery (client/delivery.py)
        profiling = type("P", (), {"hot": False})()
        process = type("Process", (), {"lanes": {"replica_0"}})()
        queue: list = []
        queue_max = 100

        def new_span_id(self) -> int:
            return 1

        def new_ids(self) -> tuple[int, int]:
            return 1, 2

        def span(self, *a: Any) -> None:
            pass

    from rl_insight.client.lanes import StateBlock

    seen: list = []

    def body() -> None:
        with StateBlock(Exp(), table, "generate", "replica_0", {}):  # type: ignore[arg-type]
            seen.extend(table.holders())

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert [(h[0], h[1], h[3]) for h in seen] == [("replica_0", "generate", t.ident)] and table.holders() == []
    assert [(item[4], item[5]) for item in Exp.queue] == [("generate", "replica_0")] * 2  # its start, its end


def test_native_frames_say_why_when_py_spy_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cs, "_py_spy", lambda: None)
    state, message, frames = cs.native_stacks(os.getpid())
    assert state == "not_installed" and "pip install py-spy" in message and frames == {}


@pytest.mark.skipif(cs._py_spy() is None, reason="py-spy is not installed (it is in the dev extra)")
@pytest.mark.socket  # (py-spy is a process)
def test_native_frames_from_py_spy() -> None:
    state, message, frames = cs.native_stacks(os.getpid())
    if state == "refused":  # a kernel that forbids ptrace of the parent: the message says so
        assert "ptrace" in message
        return
    assert state == "ok", message
    me = frames[threading.get_ident()]
    assert any(f["func"] == "test_native_frames_from_py_spy" for f in me)


def _process(step: int | None, lanes: tuple[str, ...] = ()) -> ThisProcess:
    process = ThisProcess("h", 9, lambda: step)
    for lane in lanes:
        process.note_lane(lane)
    return process


class _Transport:
    def __init__(self) -> None:
        self.posts: list[tuple[str, bytes]] = []

    def post(self, route: str, body: bytes, headers: dict) -> Any:
        self.posts.append((route, body))
        return type("R", (), {"status": 200, "body": {}})()


def test_answers_each_selected_request_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")  # this process is rank 1: selected by ranks=(1,), never by ranks=(2,)
    woke: list[int] = []
    answers = cs.StackAnswers(_process(3, ("rank_1",)), lambda: [], lambda: woke.append(1))
    mine, other = StackRequest("aa", ranks=(1,), expires_at=time.time() + 60), StackRequest("bb", ranks=(2,))
    answers.offer(RunControl([], stacks=[mine, other]))
    assert answers.pending and woke
    transport = _Transport()
    answers.pump(transport)
    answers.offer(RunControl([], stacks=[mine]))  # still listed until the snapshot completes: answered once
    answers.pump(transport)
    assert [r for r, _ in transport.posts] == ["/api/v1/stacks/aa/report"] and answers.answered == 1


def test_an_expired_request_is_not_answered() -> None:
    answers = cs.StackAnswers(_process(None), lambda: [], lambda: None)
    answers.offer(RunControl([], stacks=[StackRequest("cc", expires_at=time.time() - 1)]))
    transport = _Transport()
    answers.pump(transport)
    assert transport.posts == [] and not answers.pending


def test_import_stays_light() -> None:
    assert "rl_insight.client.control.stacks.answers" in sys.modules and rl_insight.__name__  # imported with the client
    import subprocess

    out = subprocess.run([sys.executable, "-c", "import sys, rl_insight; print('linecache' in sys.modules and "
                          "'subprocess' in sys.modules)"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"  # linecache / subprocess are imported only when a snapshot is taken

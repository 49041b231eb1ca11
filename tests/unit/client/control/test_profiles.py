"""The client's side of profile requests (client/control/profiles/): the run's step clock heard from replies, a
request that stops matching, resuming an upload where the server is, a trace over its cap, expiry before the window."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from rl_insight.client.control.profiles.controller import ProfileController, _Upload
from rl_insight.client.control.this_process import ThisProcess
from rl_insight.client.transport import Response
from rl_insight.protocol import ProfileRequest, RunControl
from tests.conftest import wait_until

NAME = "actor_rank1-of-2_pid7_20261130120000123.json.gz"


def _controller(exp: Any) -> ProfileController:
    return ProfileController(exp, ThisProcess(exp.host, exp.pid, lambda: exp.step))


def _offer(ctl: ProfileController, control: RunControl) -> None:
    """What the delivery does with each reply: this process hears the run's clock, then the controller its requests."""
    ctl.process.hear(control)
    ctl.offer(control)


class _Exp:
    """What the controller reads of its delivery: the step this process logged, wake()."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.host, self.pid = "h", 42

    def wake(self) -> None:
        pass


def _req(first: int, last: int, **kw: Any) -> dict[str, Any]:
    return ProfileRequest(
        "ab" * 8, "p", "e", first, last, activities=("cpu",), expires_at=time.time() + 60, **kw
    ).to_wire()


@pytest.mark.slow  # (over 2 s: the full suite runs it)
def test_a_process_without_a_step_metric_follows_the_runs_clock() -> None:
    pytest.importorskip("torch")
    exp = _Exp()
    ctl = _controller(exp)
    _offer(ctl, RunControl.from_wire({"profile": [_req(3, 3)], "run_step": 1}))
    assert ctl.hot and ctl.uploads.outbox[-1][1]["state"] == "armed"
    ctl.boundary()
    assert ctl._window is None  # the run is at step 1: not yet
    _offer(ctl, RunControl.from_wire({"profile": [_req(3, 3)], "run_step": 2}))
    ctl.boundary()
    assert ctl._window is not None and ctl._window.steps == [3]
    _offer(ctl, RunControl.from_wire({"profile": [_req(3, 3)], "run_step": 3}))
    ctl.boundary()
    assert ctl._window is None
    wait_until(lambda: ctl.uploads.current is not None, timeout=30, what="the export (on the profiler's thread)")
    assert ctl.uploads.current.window["steps"] == [3]
    assert [b["state"] for _, b in ctl.uploads.outbox][-2:] == ["profiling", "uploading"]


def test_a_request_that_no_longer_matches_the_reply_is_cancelled_before_its_window() -> None:
    ctl = _controller(_Exp())
    ctl._torch = True
    ctl._warmed.set()  # (torch.profiler's warm-up is not what this is about: no torch here)
    _offer(ctl, RunControl.from_wire({"profile": [_req(5, 5)], "run_step": 1}))
    _offer(ctl, RunControl.from_wire({"profile": [], "run_step": 1}))
    assert not ctl.hot and ctl.uploads.outbox[-1][1]["state"] == "cancelled"
    _offer(ctl, RunControl.from_wire({"profile": [_req(5, 5, ranks=(99,))]}))  # a request for another rank: never taken
    assert ctl._armed is None


class _Transport:
    """Answers chunk uploads like the server: 409 with its size when the offset is not it."""

    def __init__(self, server_has: int) -> None:
        self.size = server_has
        self.offsets: list[int] = []

    def post(self, route: str, body: bytes, headers: dict[str, str]) -> Response:
        if "/status" in route:
            return Response(200, {})
        offset = int(route.split("offset=")[1].split("&")[0])
        total = int(route.split("total=")[1])
        self.offsets.append(offset)
        if offset != self.size:
            return Response(409, {"size": self.size})
        self.size += len(body)
        return Response(200, {"size": self.size, "complete": self.size == total})


def test_the_client_resumes_an_upload_where_the_server_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rl_insight.client.control.profiles.upload.PROFILE_CHUNK_BYTES", 1000)
    ctl = _controller(_Exp())
    src = tmp_path / "trace.json"
    src.write_bytes(json.dumps({"traceEvents": [{"name": str(i) * 50} for i in range(2000)]}).encode())
    req = ProfileRequest.from_wire(_req(3, 3))
    ctl.uploads.current = _Upload(req, str(src), NAME, {"start_ns": 1, "end_ns": 2, "steps": [3]})
    t = _Transport(server_has=1000)  # it already has the first chunk (a lost reply, a restart)
    for _ in range(20):
        ctl.pump(t)
        if ctl.uploads.current is None:
            break
    assert t.offsets[:3] == [0, 1000, 2000]  # told where it is, the client continued from there
    assert ctl.uploads.current is None and ctl.uploads.traces_uploaded == 1 and not src.exists()


def test_a_trace_over_the_cap_is_reported_not_sent(tmp_path: Path) -> None:
    ctl = _controller(_Exp())
    src = tmp_path / "trace.json"
    src.write_bytes(bytes(range(256)) * 4000)  # incompressible enough
    req = ProfileRequest.from_wire({**_req(3, 3), "max_bytes": 100})
    ctl.uploads.current = _Upload(req, str(src), NAME, {"start_ns": 1, "end_ns": 2, "steps": [3]})
    t = _Transport(server_has=0)
    ctl.pump(t)
    assert t.offsets == [] and ctl.uploads.current is None and not src.exists()
    state, message = ctl.uploads.outbox[-1][1]["state"], ctl.uploads.outbox[-1][1]["message"]
    assert state == "failed" and "over the request's cap" in message


class _Later:
    """The time module as the controller reads it, `ahead_s` later (a fake clock: no test sleeps for it)."""

    def __init__(self, ahead_s: float) -> None:
        self.ahead_s = ahead_s

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def time(self) -> float:
        return time.time() + self.ahead_s


def test_a_request_that_expires_before_its_window_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from rl_insight.client.control.profiles import controller

    exp = _Exp()
    ctl = _controller(exp)
    ctl._torch = True
    ctl._warmed.set()
    _offer(ctl, RunControl.from_wire({"profile": [{**_req(9, 9), "expires_at": time.time() + 60}], "run_step": 1}))
    assert ctl.hot
    monkeypatch.setattr(controller, "time", _Later(61))  # a minute on: past the request's expiry
    ctl.boundary("rank_0")
    assert not ctl.hot and ctl._armed is None
    last = ctl.uploads.outbox[-1][1]
    assert last["state"] == "expired" and "expired before its window" in last["message"]


def test_a_step_that_began_before_the_runs_clock_arrived_is_not_profiled_partially() -> None:
    """A process without a step metric hears of the run's clock through replies: if one of its lanes entered a
    state after the clock moved but before the reply came, that step began unseen and is refused, not cut."""
    ctl = _controller(_Exp())
    ctl._torch = True
    _offer(ctl, RunControl.from_wire({"profile": [_req(3, 3)], "run_step": 1, "run_step_at": time.time() - 5}))
    ctl.boundary("rank_0", "generate")  # still step 2 here (the clock says 1)
    moved_at = time.time()
    time.sleep(0.01)
    ctl.boundary("rank_0", "generate")  # step 3's first state, before this process heard that step 2 ended
    _offer(ctl, RunControl.from_wire({"profile": [_req(3, 3)], "run_step": 2, "run_step_at": moved_at}))
    ctl.boundary("rank_0", "actor_update")
    assert ctl._window is None and ctl.uploads.outbox[-1][1]["state"] == "expired"
    assert "before the run's step clock reached this process" in ctl.uploads.outbox[-1][1]["message"]

    # heard in time: the lane's last state was before the clock moved, so the window opens at the step's first state
    pytest.importorskip("torch")
    ctl = _controller(_Exp())
    _offer(ctl, RunControl.from_wire({"profile": [_req(3, 3)], "run_step": 1, "run_step_at": time.time() - 5}))
    ctl.boundary("rank_0", "generate")
    time.sleep(0.01)
    _offer(ctl, RunControl.from_wire({"profile": [_req(3, 3)], "run_step": 2, "run_step_at": time.time()}))
    ctl.boundary("rank_0", "generate")
    assert ctl._window is not None
    _offer(ctl, RunControl.from_wire({"profile": [_req(3, 3)], "run_step": 3, "run_step_at": time.time()}))
    ctl.boundary("rank_0", "generate")
    assert ctl._window is None

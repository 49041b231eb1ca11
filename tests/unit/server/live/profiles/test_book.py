"""Profile requests on the server (ProfileBook: validation, delivery, reports, resumable uploads that survive a
restart, retention) and the client's controller (the run's step clock, resuming an upload where the server is)."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path
from typing import Any

import pytest

from rl_insight.client.profiling import ProfileController, _Upload
from rl_insight.client.transport import Response
from rl_insight.errors import ConflictError, InvalidInputError, NotFoundError, PayloadTooLargeError
from rl_insight.protocol import ProfileRequest, RunControl
from rl_insight.server.live.profiles.book import ProfileBook
from rl_insight.server.live.run_control import RunControlBuilder
from tests.conftest import wait_until

NAME = "actor_rank1-of-2_pid7_20261130120000123.json.gz"


def _book(tmp_path: Path) -> ProfileBook:
    return ProfileBook(tmp_path / "profiles", analyze=False)


def test_requests_are_validated_and_named_in_the_error(tmp_path: Path) -> None:
    book = _book(tmp_path)
    with pytest.raises(InvalidInputError, match="at most 8 steps"):
        book.create("p", "e", 10, 30)
    with pytest.raises(InvalidInputError, match="activities"):
        book.create("p", "e", 1, 1, activities=["gpu"])
    with pytest.raises(InvalidInputError, match="project and experiment_name"):
        book.create("", "e", 1, 1)
    with pytest.raises(NotFoundError):
        book.get("../../etc")
    for _ in range(8):
        book.create("p", "e", 5, 5)
    with pytest.raises(ConflictError, match="already has 8 active"):
        book.create("p", "e", 5, 5)


def test_delivery_is_per_run_and_stops_when_cancelled_or_expired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    book = _book(tmp_path)
    a = book.create("p", "e", 3, 3, ranks=[1])
    b = book.create("p", "e", 4, 4, ttl_s=1)
    other = book.create("p", "other", 3, 3)
    book.clock.note("p", "e", 2)
    control = RunControlBuilder(book.clock, book)  # (what every ingest reply of the run carries)
    got = control.for_client("p", "e").to_wire()
    assert {r["id"] for r in got["profile"]} == {a["id"], b["id"]} and got["run_step"] == 2
    assert ProfileRequest.from_wire(got["profile"][0]).to_wire() == got["profile"][0]  # what a client accepts
    book.cancel(a["id"])
    real = time.time
    monkeypatch.setattr("rl_insight.server.live.profiles.book._now", lambda: real() + 5)
    assert control.for_client("p", "e").to_wire()["profile"] == []
    assert book.get(b["id"])["state"] == "expired" and book.get(a["id"])["state"] == "cancelled"
    assert [r["id"] for r in control.for_client("p", "other").to_wire()["profile"]] == [other["id"]]


def test_reports_never_reopen_a_finished_process_and_hostile_fields_are_capped(tmp_path: Path) -> None:
    book = _book(tmp_path)
    rid = book.create("p", "e", 3, 3)["id"]
    proc = {"host": "<script>alert(1)</script>" * 20, "pid": 7, "rank": 1, "lanes": ["rank_1"] * 500}
    book.report(rid, {"state": "armed", "process": proc})
    book.report(rid, {"state": "failed", "process": proc, "message": "x" * 10_000})
    after = book.report(rid, {"state": "profiling", "process": proc})  # late and out of order
    entry = after["process"]
    assert entry["state"] == "failed" and len(entry["message"]) == 2000 and len(entry["lanes"]) == 64
    assert len(entry["host"]) == 128
    with pytest.raises(InvalidInputError, match="state must be one of"):
        book.report(rid, {"state": "hacked", "process": proc})
    with pytest.raises(InvalidInputError, match="host"):
        book.report(rid, {"state": "armed", "process": {"pid": "1"}})


def test_an_upload_resumes_where_the_server_is_even_after_a_restart(tmp_path: Path) -> None:
    book = _book(tmp_path)
    rid = book.create("p", "e", 3, 3, max_bytes=1000)["id"]
    data = gzip.compress(json.dumps({"traceEvents": []}).encode())
    half = len(data) // 2
    assert book.upload(rid, NAME, 0, len(data), data[:half]) == {"size": half, "complete": False}
    book.close()
    restarted = _book(tmp_path)  # a new server process on the same data directory
    with pytest.raises(ConflictError) as err:
        restarted.upload(rid, NAME, 0, len(data), data)
    assert err.value.size == half
    assert restarted.upload(rid, NAME, half, len(data), data[half:])["complete"]
    assert restarted.file(rid, NAME).read_bytes() == data
    with pytest.raises(PayloadTooLargeError, match="cap of 1000"):
        restarted.upload(rid, "b_rank0_pid1_20261130120000123.json.gz", 0, 5000, b"x")
    for bad in ("../x.json.gz", "a/b.json.gz", ".hidden.json.gz", "x.exe", "x" * 300 + ".json.gz"):
        with pytest.raises(InvalidInputError):
            restarted.upload(rid, bad, 0, 10, b"x")


def test_retention_takes_the_runs_profiles_with_it(tmp_path: Path) -> None:
    book = _book(tmp_path)
    gone = book.create("p", "old", 1, 1)["id"]
    kept = book.create("p", "new", 1, 1)["id"]
    assert book.forget_runs(drop={("p", "old")}) == 1
    assert not (tmp_path / "profiles" / gone).exists() and (tmp_path / "profiles" / kept).exists()
    with pytest.raises(NotFoundError):
        book.get(gone)


# ---------------------------------------------------------------------------- the client's controller
class _Exp:
    """What the controller reads of its exporter: the step clock, the process identity, wake()."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.host, self.pid = "h", 42

    def wake(self) -> None:
        pass


def _req(first: int, last: int, **kw: Any) -> dict[str, Any]:
    return ProfileRequest(
        "ab" * 8, "p", "e", first, last, activities=("cpu",), expires_at=time.time() + 60, **kw
    ).to_wire()


def test_a_process_without_a_step_metric_follows_the_runs_clock() -> None:
    pytest.importorskip("torch")
    exp = _Exp()
    ctl = ProfileController(exp)
    ctl.offer(RunControl.from_wire({"profile": [_req(3, 3)], "run_step": 1}))
    assert ctl.hot and ctl.uploads.outbox[-1][1]["state"] == "armed"
    ctl.boundary()
    assert ctl._window is None  # the run is at step 1: not yet
    ctl.offer(RunControl.from_wire({"profile": [_req(3, 3)], "run_step": 2}))
    ctl.boundary()
    assert ctl._window is not None and ctl._window.steps == [3]
    ctl.offer(RunControl.from_wire({"profile": [_req(3, 3)], "run_step": 3}))
    ctl.boundary()
    assert ctl._window is None
    wait_until(lambda: ctl.uploads.current is not None, timeout=30, what="the export (on the profiler's thread)")
    assert ctl.uploads.current.window["steps"] == [3]
    assert [b["state"] for _, b in ctl.uploads.outbox][-2:] == ["profiling", "uploading"]


def test_a_request_that_no_longer_matches_the_reply_is_cancelled_before_its_window() -> None:
    ctl = ProfileController(_Exp())
    ctl._torch = True
    ctl.offer(RunControl.from_wire({"profile": [_req(5, 5)], "run_step": 1}))
    ctl.offer(RunControl.from_wire({"profile": [], "run_step": 1}))
    assert not ctl.hot and ctl.uploads.outbox[-1][1]["state"] == "cancelled"
    ctl.offer(RunControl.from_wire({"profile": [_req(5, 5, ranks=(99,))]}))  # a request for another rank: never taken
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
    monkeypatch.setattr("rl_insight.client.profile_upload.PROFILE_CHUNK_BYTES", 1000)
    ctl = ProfileController(_Exp())
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
    ctl = ProfileController(_Exp())
    src = tmp_path / "trace.json"
    src.write_bytes(bytes(range(256)) * 4000)  # incompressible enough
    req = ProfileRequest.from_wire({**_req(3, 3), "max_bytes": 100})
    ctl.uploads.current = _Upload(req, str(src), NAME, {"start_ns": 1, "end_ns": 2, "steps": [3]})
    t = _Transport(server_has=0)
    ctl.pump(t)
    assert t.offsets == [] and ctl.uploads.current is None and not src.exists()
    state, message = ctl.uploads.outbox[-1][1]["state"], ctl.uploads.outbox[-1][1]["message"]
    assert state == "failed" and "over the request's cap" in message


def test_a_request_that_expires_before_its_window_says_so() -> None:
    exp = _Exp()
    ctl = ProfileController(exp)
    ctl._torch = True
    ctl.offer(RunControl.from_wire({"profile": [{**_req(9, 9), "expires_at": time.time() + 0.2}], "run_step": 1}))
    assert ctl.hot
    time.sleep(0.3)
    ctl.boundary("rank_0")
    assert not ctl.hot and ctl._armed is None
    last = ctl.uploads.outbox[-1][1]
    assert last["state"] == "expired" and "expired before its window" in last["message"]


def test_a_process_that_goes_silent_mid_window_ends_failed(tmp_path: Path) -> None:
    from rl_insight.protocol import ClientInfo
    from rl_insight.server.live.clients import ClientTracker

    book = _book(tmp_path)
    rid = book.create("p", "e", 3, 3)["id"]
    book.report(rid, {"state": "profiling", "process": {"host": "node1", "pid": 77, "rank": 2}})
    tracker = ClientTracker(0.05, lambda spans: None, lambda p, e: None)
    tracker.on_silent.append(book.process_silent)
    tracker.seen(ClientInfo("c1", 77, "node1", "p", "e"), [], [], False)
    time.sleep(0.1)
    tracker.reap()
    proc = next(iter(book.get(rid)["processes"].values()))
    assert proc["state"] == "failed" and "went silent while profiling" in proc["message"]
    assert book.get(rid)["state"] == "failed"


def test_a_step_that_began_before_the_runs_clock_arrived_is_not_profiled_partially() -> None:
    """A process without a step metric hears of the run's clock through replies: if one of its lanes entered a
    state after the clock moved but before the reply came, that step began unseen and is refused, not cut."""
    ctl = ProfileController(_Exp())
    ctl._torch = True
    ctl.offer(RunControl.from_wire({"profile": [_req(3, 3)], "run_step": 1, "run_step_at": time.time() - 5}))
    ctl.boundary("rank_0", "generate")  # still step 2 here (the clock says 1)
    moved_at = time.time()
    time.sleep(0.01)
    ctl.boundary("rank_0", "generate")  # step 3's first state, before this process heard that step 2 ended
    ctl.offer(RunControl.from_wire({"profile": [_req(3, 3)], "run_step": 2, "run_step_at": moved_at}))
    ctl.boundary("rank_0", "actor_update")
    assert ctl._window is None and ctl.uploads.outbox[-1][1]["state"] == "expired"
    assert "before the run's step clock reached this process" in ctl.uploads.outbox[-1][1]["message"]

    # heard in time: the lane's last state was before the clock moved, so the window opens at the step's first state
    pytest.importorskip("torch")
    ctl = ProfileController(_Exp())
    ctl.offer(RunControl.from_wire({"profile": [_req(3, 3)], "run_step": 1, "run_step_at": time.time() - 5}))
    ctl.boundary("rank_0", "generate")
    time.sleep(0.01)
    ctl.offer(RunControl.from_wire({"profile": [_req(3, 3)], "run_step": 2, "run_step_at": time.time()}))
    ctl.boundary("rank_0", "generate")
    assert ctl._window is not None
    ctl.offer(RunControl.from_wire({"profile": [_req(3, 3)], "run_step": 3, "run_step_at": time.time()}))
    ctl.boundary("rank_0", "generate")
    assert ctl._window is None

"""Profile requests on the server (ProfileBook: validation, delivery, reports, resumable uploads that survive a
restart, retention, a process gone silent); the client's side is tests/unit/client/control/test_profiles.py."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest

from rl_insight.errors import ConflictError, InvalidInputError, NotFoundError, PayloadTooLargeError
from rl_insight.protocol import ProfileRequest
from rl_insight.server.control.run_control import RunControlBuilder
from rl_insight.server.rooms.profiles.book import ProfileBook

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
    control = RunControlBuilder(book.clock)
    control.add("profile", book)  # (what every ingest reply of the run carries)
    got = control.for_client("p", "e").to_wire()
    assert {r["id"] for r in got["profile"]} == {a["id"], b["id"]} and got["run_step"] == 2
    assert ProfileRequest.from_wire(got["profile"][0]).to_wire() == got["profile"][0]  # what a client accepts
    book.cancel(a["id"])
    real = time.time
    monkeypatch.setattr("rl_insight.server.rooms.profiles.book._now", lambda: real() + 5)
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

"""Profile requests shared by the servers of a fleet (rooms/profiles/shared.py over fleet/records.py): two profile
books, as two ingest servers, on one real PostgreSQL store and one shared trace directory."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from rl_insight.errors import NotFoundError
from rl_insight.server.fleet.records import SharedRecords
from rl_insight.server.rooms.profiles import analysis as profile_analysis
from rl_insight.server.rooms.profiles.book import ProfileBook
from rl_insight.server.rooms.profiles.shared import KIND, SharedRequests
from rl_insight.server.runstore.backend.location import parse_store

NAME = "actor_rank0-of-1_pid7_20261201120000123.json.gz"


def _report(book: ProfileBook, rid: str, state: str, pid: int = 7, **extra: Any) -> dict[str, Any]:
    return book.report(rid, {"state": state, "process": {"host": "h", "pid": pid, "rank": 0, "lanes": ["actor"]},
                             **extra})


@pytest.fixture
def pair(postgres_url: str, tmp_path: Path) -> Iterator[tuple[ProfileBook, ProfileBook]]:
    """Two servers' books on one store; no poll thread races the test (it calls refresh itself)."""
    loc = parse_store(postgres_url, tmp_path)
    books = []
    for _ in range(2):
        book = ProfileBook(tmp_path / "shared" / "profiles", analyze=False,
                           shared=SharedRequests(SharedRecords(loc, KIND)))
        assert book._poll is not None
        book._poll.stop()
        books.append(book)
    yield books[0], books[1]
    for book in books:
        book.close()


def test_a_request_made_on_one_server_is_armed_reported_and_finished_through_another(
        pair: tuple[ProfileBook, ProfileBook]) -> None:
    a, b = pair
    rid = a.create("p", "e", 3, 3, lanes=["actor"])["id"]
    assert b.get(rid)["state"] == "pending"  # asked before b's next poll: read from the store
    b.refresh()
    assert [r.id for r in b.open_requests("p", "e")] == [rid]  # rides on b's ingest replies
    _report(b, rid, "armed")
    a.refresh()
    assert a.get(rid)["state"] == "running"
    assert a.get(rid)["processes"]["h:7"]["state"] == "armed"
    # the trace arrives at b in two chunks; a serves it from the shared directory
    data = b"x" * 1000
    assert b.upload(rid, NAME, 0, 1000, data[:600]) == {"size": 600, "complete": False}
    assert b.upload(rid, NAME, 600, 1000, data[600:]) == {"size": 1000, "complete": True}
    _report(b, rid, "uploaded", file=NAME)
    a.refresh()
    got = a.get(rid)
    assert got["state"] == "done" and got["files"][NAME]["complete"] and got["analysis"]["state"] == "pending"
    assert a.file(rid, NAME).read_bytes() == data
    # a late report through a never reopens the process b saw finish
    _report(a, rid, "profiling")
    assert a.get(rid)["processes"]["h:7"]["state"] == "uploaded"
    b.refresh()
    assert b.get(rid)["processes"]["h:7"]["state"] == "uploaded"


def test_changes_made_at_once_on_two_servers_are_both_kept(pair: tuple[ProfileBook, ProfileBook]) -> None:
    a, b = pair
    rid = a.create("p", "e", 3, 3)["id"]
    b.refresh()
    rec_b = b._records[rid]
    a.cancel(rid)  # b has not polled: its copy is one version behind
    # compare-and-set fails, reapplied to a's copy
    b.analysis.set_result(rec_b, {"state": "failed", "message": "from b"})
    for book in (a, b):
        book.refresh()
        got = book.get(rid)
        assert got["state"] == "cancelled" and got["analysis"]["message"] == "from b"
    # a change that has nothing left to do once the other server's copy is read is not stored again
    before = SharedRecords(a._shared.records.location, KIND).load()[rid].version  # type: ignore[union-attr]
    b.cancel(rid)
    assert SharedRecords(a._shared.records.location, KIND).load()[rid].version == before  # type: ignore[union-attr]


def test_one_server_analyses_a_trace_and_a_dead_servers_analysis_is_taken_over(
        pair: tuple[ProfileBook, ProfileBook], monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = pair
    ran: list[str] = []

    def analysis(directory: Path, names: list[str], title: str, **_: Any) -> dict[str, Any]:
        ran.append(title)  # (the analysis itself runs for real in tests/integration/test_profile_on_demand.py)
        return {"state": "done"}

    monkeypatch.setattr("rl_insight.analysis.isolated.run_isolated", analysis)
    rid = a.create("p", "e", 3, 3)["id"]
    b.upload(rid, NAME, 0, 10, b"0123456789")
    a.refresh()
    a.analysis.run_one(rid)
    b.analysis.run_one(rid)  # b had it queued too; a claimed it first
    assert len(ran) == 1
    b.refresh()
    assert b.get(rid)["analysis"]["state"] == "done"
    # a server dies mid-analysis: once past the timeout, another one claims it again, and a second loss ends it
    rec = a._records[rid]
    a.analysis.set_result(rec, {"state": "running", "attempts": 1, "started_at": time.time() - 10})
    b.refresh()
    assert not b.analysis.due(b._records[rid])  # still within its timeout: its server may be working on it
    monkeypatch.setattr(profile_analysis, "TAKEOVER_GRACE_S", -b.analysis_timeout_s)
    b.analysis.running = True  # (no analysis thread runs: the test takes b's queue itself)
    b.refresh()
    assert rid in b.analysis.queued
    b.analysis.run_one(rid)
    assert len(ran) == 2 and b.get(rid)["analysis"] == {"state": "done", "attempts": 2}
    b.analysis.set_result(b._records[rid], {"state": "running", "attempts": 2, "started_at": time.time() - 10})
    a.refresh()
    a.analysis.run_one(rid)
    assert len(ran) == 2
    got = a.get(rid)["analysis"]
    assert got["state"] == "failed" and "interrupted 2 times" in got["message"]


def test_a_request_deleted_with_its_run_leaves_every_server(pair: tuple[ProfileBook, ProfileBook]) -> None:
    a, b = pair
    rid = a.create("p", "e", 3, 3)["id"]
    keep = a.create("p", "other", 3, 3)["id"]
    b.upload(rid, NAME, 0, 4, b"abcd")
    b.refresh()
    assert a.forget_runs({("p", "e")}) == 1  # retention, on the server holding the fleet's lease
    assert not (a.root / rid).exists()
    b.refresh()
    with pytest.raises(NotFoundError):
        b.get(rid)
    assert b.open_requests("p", "e") == [] and b.get(keep)["state"] == "pending"


def test_a_server_started_later_finds_the_fleets_requests(pair: tuple[ProfileBook, ProfileBook],
                                                          postgres_url: str, tmp_path: Path) -> None:
    a, _ = pair
    rid = a.create("p", "e", 3, 3)["id"]
    _report(a, rid, "armed")
    late = ProfileBook(tmp_path / "shared" / "profiles", analyze=False,
                       shared=SharedRequests(SharedRecords(parse_store(postgres_url, tmp_path), KIND)))
    try:
        assert late.get(rid)["processes"]["h:7"]["state"] == "armed"
        assert [r.id for r in late.open_requests("p", "e")] == [rid]
    finally:
        late.close()

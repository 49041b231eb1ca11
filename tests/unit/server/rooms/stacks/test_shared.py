"""Stack snapshots shared by the servers of a fleet (rooms/stacks/book.py over fleet/shared_book.py): two books, as
two ingest servers, on one real PostgreSQL store; each server's processes known to the other through the fleet
registry (`fleet_clients`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from rl_insight.server.fleet.records import SharedRecords
from rl_insight.server.fleet.registry import FleetRegistry
from rl_insight.server.fleet.shared_book import SharedBook
from rl_insight.server.rooms.stacks.book import StackBook
from rl_insight.server.runstore.backend.location import parse_store
from tests.unit.server.rooms.stacks.test_book import RUN, answer, procs


@pytest.fixture
def pair(postgres_url: str, tmp_path: Path) -> Iterator[tuple[StackBook, StackBook]]:
    """Server a has the processes of ranks 0-1, server b those of ranks 2-3; each publishes them to the registry and
    asks it for the other's (as AppState.run_processes does). Ticks are the test's."""
    loc = parse_store(postgres_url, tmp_path)
    everyone = procs(4)
    books, registries = [], []
    for name, mine in (("a", everyone[:2]), ("b", everyone[2:])):
        registry = FleetRegistry(loc, name)
        registry.publish([(p["client_id"], *RUN, time.time(), p) for p in mine])

        def live(project: str, experiment: str, mine: list[dict[str, Any]] = mine,
                 registry: FleetRegistry = registry) -> list[dict[str, Any]]:
            return mine + registry.processes_elsewhere(project, experiment, time.time() - 30)

        shared = SharedBook(SharedRecords(loc, "stack"), lambda s: s["id"],
                            lambda s: (s["project"], s["experiment_name"]), ("reports",))
        books.append(StackBook(tmp_path / name / "stacks", live, shared=shared))
        registries.append(registry)
    yield books[0], books[1]
    for registry in registries:
        registry.close()


def test_a_snapshot_asked_on_one_server_collects_the_answers_heard_by_both(
        pair: tuple[StackBook, StackBook]) -> None:
    a, b = pair
    sid = a.create(*RUN)["id"]
    assert a.get(sid)["expected_count"] == 4  # the other server's processes too
    assert [r.id for r in b.open_requests(*RUN)] == []  # b has not polled yet
    b.tick()
    assert [r.id for r in b.open_requests(*RUN)] == [sid]  # rides on b's replies to its processes
    for rank in (0, 1):
        answer(a, sid, rank)
    for rank in (2, 3):
        answer(b, sid, rank)
    assert a.get(sid)["state"] == b.get(sid)["state"] == "pending"  # each has half of the answers
    a.tick()  # a reads b's answers: every process answered, a completes and summarises it
    done = a.get(sid)
    assert done["state"] == "complete" and done["answered"] == 4 and done["missing"] == []
    # the summary groups every server's answers: all four processes wait in the same collective
    members = {m["key"] for g in done["groups"] if g["answered"] for m in g["members"]}
    assert {k.split("/")[0] for k in members} == {f"h:{1000 + r}" for r in range(4)}, members
    b.tick()
    seen = b.get(sid)
    assert seen["state"] == "complete" and seen["summary"] == done["summary"] and seen["answered"] == 4
    assert b.open_requests(*RUN) == []


def test_a_snapshot_completed_at_once_on_two_servers_is_summarised_once(pair: tuple[StackBook, StackBook]) -> None:
    a, b = pair
    completed: list[str] = []
    for name, book in (("a", a), ("b", b)):
        book.on_complete.append(lambda snap, name=name: completed.append(name))
    sid = a.create(*RUN, deadline_s=1.0)["id"]
    b.tick()
    answer(a, sid, 0)
    answer(b, sid, 2)
    later = time.time() + 5  # past the deadline on both: each completes with what it has
    a.tick(now=later)
    b.tick(now=later)
    assert completed == ["a"]  # b found it complete in the store and took a's summary
    assert a.get(sid)["missing"] == b.get(sid)["missing"]
    assert {(p["host"], p["pid"]) for p in b.get(sid)["missing"]} == {("h", 1001), ("h", 1003)}


def test_retention_on_one_server_removes_the_snapshot_from_all(pair: tuple[StackBook, StackBook],
                                                               postgres_url: str, tmp_path: Path) -> None:
    a, b = pair
    sid = a.create(*RUN)["id"]
    fresh = StackBook(tmp_path / "c" / "stacks", lambda p, e: [],
                      shared=SharedBook(SharedRecords(parse_store(postgres_url, tmp_path), "stack"),
                                        lambda s: s["id"], lambda s: (s["project"], s["experiment_name"]),
                                        ("reports",)))
    assert fresh.get(sid)["expected_count"] == 4  # a server started later finds it in the store
    b.tick()
    assert a.forget_runs({RUN}) == 1
    b.tick()
    assert b.list(*RUN) == []

"""Scrape targets and experiments shared by the servers of a fleet (prometheus/experiments.py over
fleet/records.SharedDocument): books of two servers, each with its own file_sd file, on one real PostgreSQL store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from rl_insight.errors import ConflictError
from rl_insight.server.fleet.records import SharedDocument, SharedRecords
from rl_insight.server.prometheus.experiments import ExperimentBook
from rl_insight.server.prometheus.targets import TargetRegistry
from rl_insight.server.runstore.backend.location import StoreLocation, parse_store

RUN = {"project": "p", "experiment_name": "e"}


def _book(directory: Path, loc: StoreLocation | None) -> ExperimentBook:
    shared = SharedDocument(SharedRecords(loc, "targets"), "fleet") if loc is not None else None
    return ExperimentBook(TargetRegistry(directory / "rl-insight-targets.json"), shared=shared)


def _scraped(book: ExperimentBook) -> set[str]:
    """What this server's Prometheus scrapes: the addresses in its file_sd file."""
    return {a for group in json.loads(book.registry.path.read_text()) for a in group["targets"]}


@pytest.fixture
def loc(postgres_url: str, tmp_path: Path) -> StoreLocation:
    return parse_store(postgres_url, tmp_path)


@pytest.fixture
def pair(loc: StoreLocation, tmp_path: Path) -> Iterator[tuple[ExperimentBook, ExperimentBook]]:
    yield _book(tmp_path / "a", loc), _book(tmp_path / "b", loc)


def test_a_target_registered_or_archived_on_one_server_reaches_every_file_sd(
        pair: tuple[ExperimentBook, ExperimentBook]) -> None:
    a, b = pair
    a.register("node", [("10.0.0.1:9100", dict(RUN))], ("p", "e"))
    assert _scraped(b) == set()
    b.refresh()  # (each fleet round)
    assert _scraped(b) == {"10.0.0.1:9100"}
    b.archive("p", "e")
    a.refresh()
    assert _scraped(a) == set() and a.state(("p", "e")) == "archived"
    with pytest.raises(ConflictError, match="archived"):
        a.register("node", [("10.0.0.2:9100", dict(RUN))], ("p", "e"))
    assert a.restore("p", "e")["target_count"] == 1
    b.refresh()
    assert _scraped(b) == {"10.0.0.1:9100"} and b.list()[0]["state"] == "active"
    assert b.remove(target="10.0.0.1:9100") == 1
    a.refresh()
    assert _scraped(a) == set()


def test_registrations_at_once_on_two_servers_are_both_kept(pair: tuple[ExperimentBook, ExperimentBook],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = pair
    assert b.shared is not None
    real, reads = b.shared.pull, []

    def read_before_a_wrote() -> object:  # b read the store just before a's registration committed
        reads.append(1)
        return None if len(reads) == 1 else real()

    monkeypatch.setattr(b.shared, "pull", read_before_a_wrote)
    a.register("node", [("10.0.0.1:9100", {})], None)
    b.register("node", [("10.0.0.2:9100", {})], None)  # its compare-and-set fails: redone on a's copy
    assert len(reads) == 2
    a.refresh()
    assert _scraped(a) == _scraped(b) == {"10.0.0.1:9100", "10.0.0.2:9100"}


def test_a_server_joining_the_fleet_keeps_what_its_files_held(loc: StoreLocation, tmp_path: Path) -> None:
    alone = _book(tmp_path / "c", None)  # before it was started on the shared store
    alone.register("node", [("10.0.0.9:9100", {"project": "q", "experiment_name": "old"})], ("q", "old"))
    alone.archive("q", "old")
    first = _book(tmp_path / "a", loc)
    first.register("node", [("10.0.0.1:9100", {})], None)
    joined = _book(tmp_path / "c", loc)
    assert _scraped(joined) == {"10.0.0.1:9100"}  # the fleet's targets; its own archived experiment kept
    first.refresh()
    assert first.state(("q", "old")) == "archived"
    assert first.targets("q", "old")["targets"][0]["target"] == "10.0.0.9:9100"

"""Runs and series created by several servers of a fleet at once on one PostgreSQL (runstore/identities.py and the
writer's retry of a batch that lost a conflict): two writers handed the same new series in opposite orders never
deadlock, and a batch PostgreSQL aborts for a deadlock anyway is written again, not dropped."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rl_insight.server.live.collectors import RunStoreHealthCollector
from rl_insight.server.runstore import queries as q
from rl_insight.server.runstore.backend.location import parse_store
from rl_insight.server.runstore.identities import Identities
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.writer import RunStoreWriter
from tests.pg_cluster import PASSWORD

ROUNDS, SERIES = 20, 40


def _race(url: str) -> tuple[RunStoreWriter, RunStoreWriter]:
    """Two writers, each round the same 40 new series, one writer in name order and the other in reverse."""
    loc = parse_store(url, Path("."))
    writers = (RunStoreWriter(loc, flush_interval_s=0.005), RunStoreWriter(loc, flush_interval_s=0.005))
    writers[0].put_samples([SampleRow("p", "e", "warm", "gauge", "{}", 0.0, 1.0, 1.0)])  # (the run exists)
    assert writers[0].flush(10)

    together = threading.Barrier(2, timeout=60)  # each round starts on both at once, however loaded the machine

    def write(w: RunStoreWriter, offset: float, reverse: bool) -> None:
        for step in range(1, ROUNDS + 1):
            together.wait()
            names = [f"s{step:02d}_{i:02d}" for i in range(SERIES)]
            w.put_samples([SampleRow("p", "e", n, "gauge", "{}", float(step), 1_000.0 + step + offset, 1.0)
                           for n in (names[::-1] if reverse else names)])
            w.flush(30)

    threads = [threading.Thread(target=write, args=(writers[0], 0.25, False)),
               threading.Thread(target=write, args=(writers[1], 0.5, True))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return writers


def _every_series_has_both_samples(url: str) -> None:
    conn = RunStoreReader(parse_store(url, Path("."))).conn()
    (run,) = q.list_runs(conn)
    listed = {m["name"]: m["samples"] for m in q.metric_names(conn, run["id"])}
    assert len(listed) == ROUNDS * SERIES + 1 and set(listed.values()) == {1, 2}
    assert sum(listed.values()) == 2 * ROUNDS * SERIES + 1


def test_two_servers_creating_the_same_series_at_once_take_their_locks_in_one_order(postgres_url: str) -> None:
    writers = _race(postgres_url)
    try:
        assert [w.stats.dropped for w in writers] == [0, 0], [w.stats.last_error for w in writers]
        assert [w.stats.conflicts_retried for w in writers] == [0, 0]  # not even one deadlock to retry
        _every_series_has_both_samples(postgres_url)
    finally:
        for w in writers:
            w.close()


def test_a_batch_that_loses_a_deadlock_is_written_again(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # created as met (the order the key-order creation prevents): PostgreSQL detects deadlocks and aborts one side
    monkeypatch.setattr(Identities, "create_in_order", lambda self, conn, work, now: None)
    with psycopg.connect(postgres_url, password=PASSWORD, autocommit=True) as c:  # (detected in 50 ms, not 1 s)
        c.execute(f"ALTER DATABASE {c.info.dbname} SET deadlock_timeout = '50ms'")
    writers = _race(postgres_url)
    try:
        assert sum(w.stats.conflicts_retried for w in writers) > 0  # deadlocks did happen ...
        assert [w.stats.dropped for w in writers] == [0, 0], [w.stats.last_error for w in writers]  # ... and cost
        _every_series_has_both_samples(postgres_url)  # nothing
        retried = max(writers, key=lambda w: w.stats.conflicts_retried)  # counted where operators look
        families: dict[str, Any] = {f.name: f for f in RunStoreHealthCollector(retried).collect()}
        assert [s.value for s in families["rl_insight_server_store_conflicts_retried"].samples] == [
            retried.stats.conflicts_retried]
    finally:
        for w in writers:
            w.close()


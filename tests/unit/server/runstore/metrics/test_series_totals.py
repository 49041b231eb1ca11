"""Each series' sample count and last step, kept by the writer (metrics/series_totals.py): always what counting the
samples says, on both backends, through resends, duplicates within a batch, step-less samples and the item-by-item
path a bad item sends a batch down."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from rl_insight.server.runstore import queries as q
from rl_insight.server.runstore.backend.location import StoreLocation, parse_store
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.writer import RunStoreWriter


def _rows(name: str, steps: range, *, exp: str = "e", step: bool = True) -> list[SampleRow]:
    return [SampleRow("p", exp, name, "gauge", "{}", float(i) if step else None, 1_000.0 + i, float(i)) for i in steps]


def _counted(conn: Any, run_id: int) -> dict[str, tuple[int, float | None]]:
    """The truth, from the samples themselves (what the metrics list counted before schema 9)."""
    rows = conn.execute("SELECT s.name, (SELECT count(*) FROM samples WHERE series_id = s.id), "
                        "(SELECT max(step) FROM samples WHERE series_id = s.id) FROM series s WHERE s.run_id = ?",
                        (run_id,)).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def _listed(conn: Any, run_id: int) -> dict[str, tuple[int, float | None]]:
    return {m["name"]: (m["samples"], m["last_step"]) for m in q.metric_names(conn, run_id)}


@pytest.fixture
def store(store_at: StoreLocation):
    w = RunStoreWriter(store_at, flush_interval_s=0.02)
    yield w, RunStoreReader(store_at)
    w.close()


def test_the_metrics_list_counts_every_sample_once_through_resends(store) -> None:
    w, r = store
    w.put_samples(_rows("reward", range(10)) + _rows("loss", range(5)))
    assert w.flush(10)
    (run,) = q.list_runs(r.conn())
    assert _listed(r.conn(), run["id"]) == {"reward": (10, 9.0), "loss": (5, 4.0)}

    w.put_samples(_rows("reward", range(5, 15)) + _rows("loss", range(5, 8)))  # half of reward was stored already
    assert w.flush(10)
    assert _listed(r.conn(), run["id"]) == {"reward": (15, 14.0), "loss": (8, 7.0)} == _counted(r.conn(), run["id"])

    w.put_samples(_rows("reward", range(5, 15)) + _rows("loss", range(5, 8)))  # the same batch again: nothing new
    assert w.flush(10)
    assert _listed(r.conn(), run["id"]) == {"reward": (15, 14.0), "loss": (8, 7.0)}

    twice = _rows("loss", range(20, 21))
    w.put_samples(twice + twice + _rows("reward", range(30, 32), step=False))  # a duplicate inside one batch;
    assert w.flush(10)  # samples without a step count, and keep the last step
    assert _listed(r.conn(), run["id"]) == {"reward": (17, 14.0), "loss": (9, 20.0)} == _counted(r.conn(), run["id"])


def test_the_totals_stay_exact_when_a_bad_item_sends_the_batch_item_by_item(store) -> None:
    w, r = store
    unstorable = SampleRow("p", "bad\udcff", "loss", "gauge", "{}", 1.0, 1.0, 1.0)  # not encodable as UTF-8
    w.put_samples(_rows("reward", range(4)))
    assert w.flush(10)
    w.put_samples(_rows("reward", range(2, 6)) + [unstorable] + _rows("loss", range(3)))
    assert w.flush(10)
    assert w.stats.by_reason == {"invalid_item": 1}  # (the isolated path was taken)
    (run,) = q.list_runs(r.conn())
    assert _listed(r.conn(), run["id"]) == {"reward": (6, 5.0), "loss": (3, 2.0)} == _counted(r.conn(), run["id"])


def test_two_servers_adding_to_the_same_series_at_once_neither_deadlock_nor_lose_a_count(postgres_url: str) -> None:
    """A fleet's writers share series rows (a client that moved, a metric without per-process labels): each batch's
    totals lock them in one order, so two writers handed the same series in opposite orders never deadlock."""
    loc = parse_store(postgres_url, Path("."))
    names = [f"m{i:02d}" for i in range(40)]
    first = RunStoreWriter(loc, flush_interval_s=0.005)
    first.put_samples([r for n in names for r in _rows(n, range(1))])  # (the series exist before the race)
    assert first.flush(10)
    second = RunStoreWriter(loc, flush_interval_s=0.005)
    try:
        def write(w: RunStoreWriter, order: list[str], offset: int) -> None:
            for step in range(1, 31):
                w.put_samples([SampleRow("p", "e", n, "gauge", "{}", float(step), 1_000.0 + step + offset, 1.0)
                               for n in order])
                assert w.flush(30)

        threads = [threading.Thread(target=write, args=(first, names, 0.25)),
                   threading.Thread(target=write, args=(second, names[::-1], 0.5))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert first.stats.dropped == second.stats.dropped == 0, (first.stats, second.stats)
        conn = RunStoreReader(loc).conn()
        (run,) = q.list_runs(conn)
        assert _listed(conn, run["id"]) == {n: (61, 30.0) for n in names} == _counted(conn, run["id"])
    finally:
        first.close()
        second.close()

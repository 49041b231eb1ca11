"""Counters summed across the processes that feed them, from what each sent (issue 49 item 4): the run store's
series is the sum across processes whichever server each one reached; a resend or a late value changes nothing;
two servers writing one series at once both count."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from rl_insight.server.runstore import queries as q
from rl_insight.server.runstore.backend.location import StoreLocation
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.writer import RunStoreWriter
from tests.conftest import start_server

T0 = 1_790_000_000.0


def counter(client: str, ts: float, value: float, name: str = "tokens") -> SampleRow:
    return SampleRow("p", "e", name, "counter", "{}", None, ts, value, client)


def latest(reader: RunStoreReader, name: str = "tokens") -> list[float]:
    # the run's id, not 1: two writers creating it at once on PostgreSQL may each draw an id (one is left unused)
    run_id = q.find_run_id(reader.conn(), "p", "e")
    assert run_id is not None
    points = q.series(reader.conn(), run_id, name, x="time", agg="none")["series"][0]["points"]
    return [p[1] for p in points]


def test_two_processes_are_summed_and_resends_or_late_values_change_nothing(store_at: StoreLocation) -> None:
    w = RunStoreWriter(store_at, flush_interval_s=0.02)
    r = RunStoreReader(store_at)
    try:
        w.put_samples([counter("rank0", T0 + 1, 100.0), counter("rank1", T0 + 2, 50.0)])
        w.put_samples([counter("rank0", T0 + 3, 300.0), counter("rank0", T0 + 4, 400.0)])  # two in one batch
        assert w.flush(10)
        assert latest(r) == [100.0, 150.0, 350.0, 450.0]
        w.put_samples([counter("rank0", T0 + 4, 400.0)])  # a resend: stored once, the total unchanged
        w.put_samples([counter("rank1", T0 + 1.5, 20.0)])  # late, older than what rank1 said: changes nothing
        w.put_samples([counter("rank1", T0 + 5, 80.0)])
        assert w.flush(10)
        assert latest(r)[-1] == 480.0 and latest(r)[:4] == [100.0, 150.0, 350.0, 450.0]
        # rank1's batch came late (after rank0's later ones were stored): its count is placed at its time and every
        # later sample includes it, so the series never goes down (it read 450 then 470 then 400 before)
        w.put_samples([counter("rank1", T0 + 5.5, 100.0), counter("rank0", T0 + 6, 500.0)])
        assert w.flush(10)
        w.put_samples([counter("rank1", T0 + 5.8, 120.0)])  # late: before rank0's T0 + 6
        assert w.flush(10)
        assert latest(r)[4:] == [480.0, 500.0, 520.0, 620.0]
        gauges = [SampleRow("p", "e", "loss", "gauge", "{}", None, T0 + i, 1.0 / (i + 1)) for i in range(3)]
        w.put_samples(gauges)  # gauges are stored as sent
        assert w.flush(10)
        assert latest(r, "loss") == [1.0, 0.5, 1.0 / 3]
    finally:
        w.close()


def test_two_servers_writing_one_series_at_once_both_count(postgres_url: str, tmp_path: Path) -> None:
    from rl_insight.server.runstore.backend.location import parse_store

    loc = parse_store(postgres_url, tmp_path)
    writers = [RunStoreWriter(loc, flush_interval_s=0.005) for _ in range(2)]
    try:
        def feed(w: RunStoreWriter, client: str) -> None:
            for i in range(1, 201):
                w.put_samples([counter(client, T0 + i * 0.01 + (0.001 if client == "b" else 0), float(i))])
                if i % 10 == 0:
                    w.flush(10)

        threads = [threading.Thread(target=feed, args=(w, c)) for w, c in zip(writers, ("a", "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert all(w.flush(10) for w in writers)
        values = latest(RunStoreReader(loc))
        # 200 + 200: neither server's additions lost (each sample holds the total when its server wrote it, so the
        # largest is the last written, whichever of the two it was)
        assert max(values) == 400.0 and len(values) == 400
        assert all(a <= b for a, b in zip(values, values[1:])), "the stored series went down"  # (in time order)
        total = RunStoreReader(loc).conn().execute("SELECT total FROM series WHERE name = 'tokens'").fetchone()[0]
        assert total == 400.0
    finally:
        for w in writers:
            w.close()


@pytest.mark.parametrize("where", ["one server", "two servers"])
def test_a_counter_fed_through_two_servers_is_stored_as_the_true_sum(where: str, tmp_path: Path,
                                                                     postgres_url: str) -> None:
    """The probe's case: two processes of one run, one on each server of a fleet; /series says 1,800, not 900."""
    servers = [start_server(tmp_path / "a", store=postgres_url)]
    servers.append(start_server(tmp_path / "b", store=postgres_url) if where == "two servers" else servers[0])
    try:
        now = time.time()
        for i, srv in enumerate(servers):
            for step in range(1, 4):
                body = {"v": 1, "client": {"id": f"rank{i}", "project": "p", "experiment_name": "e"},
                        "series": [{"k": "c", "n": "tokens", "l": {"project": "p", "experiment_name": "e"}}],
                        "samples": [[0, now + step + i * 0.1, step, 300.0 * step]]}
                assert httpx.post(srv.url + "/api/v1/ingest", json=body).status_code == 200
        for srv in servers:
            series = httpx.get(srv.url + "/api/v1/runs/1/series", params={"name": "tokens", "x": "time",
                                                                           "agg": "none"}).json()["series"]
            assert series[0]["points"][-1][1] == 1800.0, series
    finally:
        for srv in {id(s): s for s in servers}.values():
            srv.stop()

"""PostgreSQL restarted or crashed under a running server: every connection the server holds for good (the writer,
each reader thread, the fleet's lease, registry and shared records) works again once the database is back, on its
own, with no restart of the server. A cluster of this module's own: restarting the session's would disturb the
other tests of this worker."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import psycopg
import pytest

from rl_insight.errors import StoreUnavailableError
from rl_insight.server.fleet.lease import FleetLease
from rl_insight.server.fleet.records import SharedRecords
from rl_insight.server.fleet.registry import FleetRegistry
from rl_insight.server.runstore import queries as q
from rl_insight.server.runstore.backend.location import StoreLocation, parse_store
from rl_insight.server.runstore.backend.postgres import PostgresBackend
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.writer import RunStoreWriter
from tests.pg_cluster import PASSWORD, PostgresCluster, postgres_bin_dir


@pytest.fixture(scope="module")
def cluster() -> Iterator[PostgresCluster]:
    if postgres_bin_dir() is None:
        pytest.skip("PostgreSQL not installed (apt-get install postgresql-15)")
    c = PostgresCluster(durable_commits=True)  # (a crash loses no commit)
    c.wait_ready()
    yield c
    c.stop()


@pytest.fixture
def store(cluster: PostgresCluster, monkeypatch: pytest.MonkeyPatch) -> StoreLocation:
    monkeypatch.setenv("RL_INSIGHT_STORE_PASSWORD", PASSWORD)
    return parse_store(cluster.url(cluster.create_database("restart")), Path("."))


def _samples(n: int, name: str, t0: float = 1_000.0) -> list[SampleRow]:
    return [SampleRow("p", "e", name, "gauge", "{}", float(i), t0 + i, float(i)) for i in range(n)]


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_every_connection_works_again_after_the_database_was_down(store: StoreLocation, cluster: PostgresCluster,
                                                                  mode: str) -> None:
    writer = RunStoreWriter(store, flush_interval_s=0.02)
    reader = RunStoreReader(store)
    lease, registry, records = FleetLease(store, "a"), FleetRegistry(store, "a"), SharedRecords(store, "stack")
    try:
        writer.put_samples(_samples(10, "before"))
        assert writer.flush(10)
        assert q.metric_names(reader.conn(), 1)[0]["samples"] == 10
        assert lease.refresh() is True
        registry.publish([("c1", "p", "e", time.time())])
        records.create("r1", ("p", "e"), {"n": 1})

        cluster.halt(mode)
        try:  # while it is down: the batch is refused (its client resends), nothing hangs, reads say unavailable
            since = writer.seq()
            writer.put_samples(_samples(5, "during"))
            assert writer.durable(since).result(30) is False
            assert writer.stats.degraded_since is not None and writer.stats.by_reason.get("write_error") == 5
            with pytest.raises(Exception) as err:
                q.metric_names(reader.conn(), 1)
            assert PostgresBackend(store).is_storage_failure(err.value), err.value  # (503 to a request, app.py)
            with pytest.raises(Exception) as err:
                registry.live_runs(0)
            assert PostgresBackend(store).is_storage_failure(err.value)
            assert lease.refresh() is False
            since = writer.seq()
            writer.put_samples(_samples(5, "during"))  # a second try while down: still refused, still no hang
            assert writer.durable(since).result(30) is False
        finally:
            cluster.resume()

        since = writer.seq()
        writer.put_samples(_samples(5, "during"))  # the client's resend once it is back
        assert writer.durable(since).result(30) is True
        assert writer.stats.degraded_since is None
        names = {m["name"]: m["samples"] for m in q.metric_names(reader.conn(), 1)}
        assert names == {"before": 10, "during": 5}  # stored once, nothing from before lost
        assert registry.live_runs(0) == {("p", "e")}
        registry.publish([("c1", "p", "e", time.time())])
        assert records.update("r1", {"n": 2}, 1) is None
        assert lease.refresh() is True
    finally:
        for closing in (writer.close, lease.close, registry.close):
            closing()


def test_a_connection_lost_inside_a_transaction_runs_nothing_more_of_it(store: StoreLocation,
                                                                      cluster: PostgresCluster) -> None:
    """The rest of a transaction whose connection dropped must not run in autocommit on a new connection (half a
    batch committed); after the holder's ROLLBACK the connection is usable again."""

    conn = PostgresBackend(store).connect()
    try:
        conn.execute("CREATE TABLE t (v BIGINT)")
        conn.execute("BEGIN")
        conn.execute("INSERT INTO t VALUES (1)")
        with psycopg.connect(store.conninfo()[0], password=PASSWORD, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                          "AND pid <> pg_backend_pid()")
        with pytest.raises(psycopg.OperationalError):
            conn.execute("INSERT INTO t VALUES (2)")
        assert conn.in_transaction  # (until the holder rolls back)
        with pytest.raises(psycopg.OperationalError, match="lost inside a transaction"):
            conn.execute("INSERT INTO t VALUES (3)")
        conn.execute("ROLLBACK")
        assert not conn.in_transaction and conn.reconnects == 0
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 0  # nothing of it was committed
        assert conn.reconnects == 1
    finally:
        conn.close()


def test_no_new_connection_is_a_503_naming_the_store_never_a_password(store: StoreLocation,
                                                                      cluster: PostgresCluster) -> None:
    RunStoreWriter(store).close()  # (the schema)
    reader = RunStoreReader(store)
    reader.conn()
    cluster.halt("immediate")
    try:
        for _ in range(2):  # the dropped connection found out, then no new one can be opened: both alike
            with pytest.raises(StoreUnavailableError) as err:
                reader.conn().execute("SELECT 1")
        assert err.value.http_status == 503 and store.display in str(err.value)
        assert PASSWORD not in f"{err.value} {err.value.hint}"
    finally:
        cluster.resume()
    assert reader.conn().execute("SELECT 1").fetchone()[0] == 1

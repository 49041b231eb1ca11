"""What only the PostgreSQL backend has to say (the contract both share runs in the other runstore tests): store URLs
and where passwords go, foreign and newer databases refused untouched, versioned migrations under one lock, and a
connection lost mid-run (the server restarted, a proxy dropped it) costing only what was not acknowledged."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rl_insight.errors import ConfigError, StoreError
from rl_insight.protocol import SpanRecord
from rl_insight.server.runstore import queries as q
from rl_insight.server.runstore.backend import SCHEMA_VERSION, migrations
from rl_insight.server.runstore.backend import postgres as pg
from rl_insight.server.runstore.backend.location import StoreLocation, parse_store
from rl_insight.server.runstore.backend.migrations import AddColumn, Run, Step
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.writer import RunStoreWriter
from tests.pg_cluster import PASSWORD, ROLE


def _raw(url: str) -> psycopg.Connection:
    return psycopg.connect(url, password=PASSWORD, autocommit=True)


def _samples(n: int, exp: str = "e", name: str = "reward") -> list[SampleRow]:
    return [SampleRow("p", exp, name, "gauge", "{}", float(i), 1_000.0 + i, float(i)) for i in range(n)]


@pytest.mark.parametrize("url,problem", [
    ("postgresql://rl:secret@db:5432/rl", "carries a password"),
    ("postgresql://rl@db:5432/rl?password=secret", "password parameter"),
    ("mysql://rl@db/rl", "scheme 'mysql' is not supported"),
    ("postgresql://rl@:5432/rl", "names no host"),
    ("postgresql://rl@db:5432/", "no single database"),
    ("postgresql://rl@db:5432/a/b", "no single database"),
    ("postgresql://rl@db:99999/rl", "not a valid URL"),
    ("postgresql://rl@db/rl?sslmode=require&evil=1", "unknown parameters ['evil']"),
    # a password with an unescaped `/`, `#` or `?` splits into the port, path, fragment or query: never echoed
    ("postgresql://rl:S3KR/XQ9Z@db:5432/rl", "not a valid URL"),
    ("postgresql://rl:S3KR#XQ9Z@db:5432/rl", "not a valid URL"),
    ("postgresql://rl:S3KR?XQ9Z@db:5432/rl", "not a valid URL"),
    ("postgresql://rl@db:5432/rl#S3KRXQ9Z", "looks like part of a password"),
    ("postgresql://rl@db:5432/S3KR/XQ9Z@x", "looks like part of a password"),
    ("postgresql://rl@db:5432/rl?sslmode=S3KR&x=XQ9Z", "unknown parameters ['x']"),
])
def test_store_urls_are_checked_and_never_carry_a_password(url: str, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_store(url, Path("/data"))
    assert problem in str(err.value)
    for part in ("secret", "S3KR", "XQ9Z"):
        assert part not in str(err.value) and part not in str(err.value.hint or "")


def test_store_locations() -> None:
    assert parse_store(None, Path("/d")) == StoreLocation("sqlite", path=Path("/d/runstore.sqlite"))
    assert parse_store("sqlite:///tmp/x.sqlite", Path("/d")).path == Path("/tmp/x.sqlite")
    loc = parse_store("postgres://rl@db.example:5433/rli?sslmode=verify-full", Path("/d"))
    assert (loc.kind, loc.display) == ("postgresql", "postgresql://rl@db.example:5433/rli?sslmode=verify-full")


def test_a_wrong_password_is_a_clear_error_that_names_where_passwords_go(postgres_url: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_STORE_PASSWORD", "not-it")
    with pytest.raises(StoreError) as err:
        RunStoreWriter(parse_store(postgres_url, Path(".")))
    text = f"{err.value} {err.value.hint}"
    assert "cannot connect to the run store postgresql://" in text and "RL_INSIGHT_STORE_PASSWORD" in text
    assert "not-it" not in text


def test_a_foreign_database_is_refused_untouched(postgres_url: str) -> None:
    with _raw(postgres_url) as c:
        c.execute("CREATE TABLE customers (id INT)")
        c.execute("INSERT INTO customers VALUES (1)")
    with pytest.raises(StoreError, match="is not an rl-insight run store .*customers"):
        RunStoreWriter(parse_store(postgres_url, Path(".")))
    with _raw(postgres_url) as c:
        tables = [r[0] for r in c.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        assert tables == ["customers"] and c.execute("SELECT count(*) FROM customers").fetchone()[0] == 1


def test_a_newer_or_other_store_is_refused_untouched(postgres_url: str) -> None:
    loc = parse_store(postgres_url, Path("."))
    RunStoreWriter(loc).close()
    with _raw(postgres_url) as c:
        c.execute("UPDATE rl_insight_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="has schema version 99; this rl-insight understands"):
        RunStoreWriter(loc)
    with _raw(postgres_url) as c:
        c.execute("UPDATE rl_insight_meta SET value = 'someone else' WHERE key = 'application'")
    with pytest.raises(StoreError, match="not an rl-insight run store .*someone else"):
        RunStoreReader(loc).conn()


def test_migrations_run_once_in_order_under_the_lock(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    loc = parse_store(postgres_url, Path("."))
    w = RunStoreWriter(loc)
    w.put_samples(_samples(5))
    assert w.flush(10)
    w.close()
    # two later versions: what they add is applied in order, the version recorded, the data kept
    later = SCHEMA_VERSION + 2
    monkeypatch.setattr(pg, "SCHEMA_VERSION", later)
    monkeypatch.setattr(migrations, "STEPS", (*migrations.STEPS,
                                              Step(later - 1, "a note", (AddColumn("runs", "note", "TEXT"),)),
                                              Step(later, "noted", (Run("UPDATE runs SET note = 'migrated'"),))))
    starts: list[Any] = []
    threads = [threading.Thread(target=lambda: starts.append(pg.connect_postgres(loc))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(starts) == 3  # three servers starting at once: one migrated, the others found it done
    with _raw(postgres_url) as c:
        assert c.execute("SELECT value FROM rl_insight_meta WHERE key = 'schema_version'").fetchone()[0] == str(later)
        assert c.execute("SELECT note, last_step FROM runs").fetchall() == [("migrated", 4.0)]
    for conn in starts:
        conn.close()


def test_a_version_5_store_gains_the_fleet_tables_the_span_summary_and_the_series_totals(postgres_url: str) -> None:
    loc = parse_store(postgres_url, Path("."))
    w = RunStoreWriter(loc)
    w.put_samples(_samples(3))
    w.put_spans([], [SpanRecord("s1", "t", None, "step", "trainer/0", "state", 1 << 40, (1 << 40) + 5,
                                {"project": "p", "experiment_name": "e"})])
    assert w.flush(10)
    w.close()
    with _raw(postgres_url) as c:  # as version 5 left it
        c.execute("DROP TABLE fleet_clients")
        c.execute("DROP TABLE fleet_records")
        c.execute("DROP TABLE span_lod")
        c.execute("DROP TABLE span_lod_dirty")
        c.execute("ALTER TABLE series DROP COLUMN n_samples")
        c.execute("ALTER TABLE series DROP COLUMN last_step")
        c.execute("DROP INDEX samples_once")  # (before version 9, a resent sample was stored again)
        c.execute("INSERT INTO samples SELECT * FROM samples WHERE step >= 1")
        c.execute("UPDATE rl_insight_meta SET value = '5' WHERE key = 'schema_version'")
    RunStoreWriter(loc).close()
    listed = q.metric_names(RunStoreReader(loc).conn(), 1)  # version 9 removed the copies, then counted
    assert [(m["name"], m["samples"], m["last_step"]) for m in listed] == [("reward", 3, 2.0)]
    with _raw(postgres_url) as c:
        version = c.execute("SELECT value FROM rl_insight_meta WHERE key = 'schema_version'").fetchone()[0]
        assert version == str(SCHEMA_VERSION)
        assert c.execute("SELECT count(*) FROM fleet_clients").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM fleet_records").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM samples").fetchone()[0] == 3
        with pytest.raises(psycopg.errors.UniqueViolation):  # and a copy cannot be stored any more
            c.execute("INSERT INTO samples SELECT * FROM samples LIMIT 1")
        # the spans already stored were marked for the summary when it was created (and the writer may have
        # summarized them already)
        marked = c.execute("SELECT lane, level, bucket_ns FROM span_lod_dirty WHERE level = 0").fetchall()
        built = c.execute("SELECT lane, name FROM span_lod WHERE level = 0").fetchall()
        assert marked == [("trainer/0", 0, ((1 << 40) // (64 << 30)) * (64 << 30))] or built == [("trainer/0", "step")]


def test_a_fresh_database_is_created_once_by_servers_starting_together(postgres_url: str) -> None:
    loc = parse_store(postgres_url, Path("."))
    errors: list[BaseException] = []

    def start() -> None:
        try:
            pg.connect_postgres(loc).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with _raw(postgres_url) as c:
        assert c.execute("SELECT count(*) FROM rl_insight_meta").fetchone()[0] == 2


def test_a_lost_connection_costs_only_what_was_not_acknowledged(postgres_url: str) -> None:
    loc = parse_store(postgres_url, Path("."))
    w = RunStoreWriter(loc, flush_interval_s=0.02)
    r = RunStoreReader(loc)
    try:
        w.put_samples(_samples(10))
        assert w.flush(10)
        assert q.metric_names(r.conn(), 1)[0]["samples"] == 10
        with _raw(postgres_url) as c:  # the server drops every connection of the store (a restart, a proxy)
            c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s AND pid <> "
                      "pg_backend_pid() AND datname = current_database()", (ROLE,))
        since = w.seq()
        w.put_samples(_samples(20, name="loss"))
        if w.durable(since).result(10) is False:  # the batch on the dead connection: never acknowledged, counted
            assert w.stats.by_reason.get("write_error") == 20 and w.stats.degraded_since is not None
            w.put_samples(_samples(20, name="loss"))  # what a client does then: send it again
        since = w.seq()
        w.put_spans([], [SpanRecord("s1", "t", None, "rollout", "replica_0", "state", 1, 5,
                                    {"project": "p", "experiment_name": "e"})])
        assert w.durable(since).result(10) is True  # the writer connected again by itself
        assert w.stats.degraded_since is None
        names = {m["name"]: m["samples"] for m in q.metric_names(r.conn(), 1)}  # so did the reader
        assert names == {"reward": 10, "loss": 20}
    finally:
        w.close()


def test_strings_postgresql_cannot_hold_cost_only_their_item(postgres_url: str) -> None:
    loc = parse_store(postgres_url, Path("."))
    w = RunStoreWriter(loc, flush_interval_s=0.02)
    try:
        since = w.seq()
        w.put_samples([*_samples(3), SampleRow("p", "e", "bad\x00name", "gauge", "{}", 1.0, 1.0, 1.0)])
        w.durable(since).result(10)
        conn = RunStoreReader(loc).conn()
        (run,) = q.list_runs(conn)  # (its id: PostgreSQL's sequences do not roll back, so ids may skip)
        names = {m["name"]: m["samples"] for m in q.metric_names(conn, run["id"])}
        assert names == {"reward": 3} or names == {"reward": 3, "bad\ufffdname": 1}, names
    finally:
        w.close()

"""The one migration chain (runstore/backend/migrations.py), from every released schema version on both engines.

Each store starts from the schema that release created (schemas/, dumped from the release's own code by
`python -m tools.store_schemas`), holding data as that release wrote it (a resend stored twice where the store did
not refuse copies yet). Opening it with today's code must give the same tables, columns and indexes as a fresh store,
keep every row a user stored, count what the later versions count, and take new writes.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rl_insight.server.runstore import queries as q
from rl_insight.server.runstore import step_marks
from rl_insight.server.runstore.backend import SCHEMA_VERSION, migrations, open_backend
from rl_insight.server.runstore.backend.location import parse_store
from rl_insight.server.runstore.backend.schema import APPLICATION_ID
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.writer import RunStoreWriter
from tests.pg_cluster import PASSWORD

SCHEMAS = Path(__file__).parent / "schemas"
SQLITE_VERSIONS = sorted(int(p.stem[1:]) for p in (SCHEMAS / "sqlite").glob("v*.sql"))
POSTGRES_VERSIONS = sorted(int(p.stem[1:]) for p in (SCHEMAS / "postgres").glob("v*.sql"))
SPAN_START = 1 << 40


def test_every_released_version_has_its_schema_and_a_step() -> None:
    assert SQLITE_VERSIONS == list(range(1, SCHEMA_VERSION + 1))
    assert POSTGRES_VERSIONS == list(range(migrations.FIRST_POSTGRES_VERSION, SCHEMA_VERSION + 1))
    assert [s.version for s in migrations.STEPS] == list(range(2, SCHEMA_VERSION + 1))


def _old_rows(conn: Any, version: int, placeholder: str) -> None:
    """What that release stored: a run, a series with three samples (the last one resent: stored twice where the
    store did not refuse copies yet), a finished span."""
    mark = lambda n: ", ".join([placeholder] * n)  # noqa: E731
    conn.execute(f"INSERT INTO runs (id, project, experiment_name, first_seen, last_seen, last_step) VALUES "
                 f"({mark(6)})", (1, "p", "e", 100.0, 103.0, 2.0))
    conn.execute(f"INSERT INTO series (id, run_id, name, kind, labels) VALUES ({mark(5)})",
                 (1, 1, "reward", "gauge", "{}"))
    samples = [(1, float(i), 100.0 + i, 0.5 * i) for i in range(3)]
    copies = version < (4 if placeholder == "?" else 9)
    for row in samples + (samples[-1:] if copies else []):
        conn.execute(f"INSERT INTO samples (series_id, step, ts, value) VALUES ({mark(4)})", row)
    if version >= 9:  # (its writer kept each series' totals)
        conn.execute("UPDATE series SET n_samples = 3, last_step = 2.0")
    # the step metric, as a job logs it (a value with a fraction, a step logged again after a restart, one past
    # what a float holds exactly): version 12 marks its steps from these by step_marks.mark_of's rule
    conn.execute(f"INSERT INTO series (id, run_id, name, kind, labels) VALUES ({mark(5)})",
                 (2, 1, "training_global_step", "gauge", "{}"))
    for row in STEP_SAMPLES:
        conn.execute(f"INSERT INTO samples (series_id, step, ts, value) VALUES ({mark(4)})", (2, None, *row))
    conn.execute(f"INSERT INTO spans (run_id, id, trace_id, parent_id, name, lane, kind, start_ns, end_ns, attributes) "
                 f"VALUES ({mark(10)})", (1, "s1", "t", None, "step", "trainer/0", "state", SPAN_START,
                                          SPAN_START + 5, '{"project": "p", "experiment_name": "e"}'))


STEP_SAMPLES = [(100.5, 1.0), (101.5, 2.7), (101.0, 2.0), (102.0, 3.0), (105.0, 2.0), (106.0, 2.0**60),
                (107.0, -4.5)]


def _check_upgraded(reader_conn: Any, version: int) -> None:
    listed = q.metric_names(reader_conn, 1)  # version 9's totals, counted from the samples (copies gone)
    assert [(m["name"], m["samples"], m["last_step"]) for m in listed if m["name"] == "reward"] == [("reward", 3, 2.0)]
    assert reader_conn.execute("SELECT count(*) FROM samples WHERE series_id = 1").fetchone()[0] == 3
    if version < 12:  # version 12's backfill (SQL) marked what the writer's rule (step_marks.mark_of) marks
        stored = reader_conn.execute("SELECT ts, step FROM step_marks ORDER BY ts").fetchall()
        assert [(ts, step) for ts, step in stored] == step_marks.from_samples(STEP_SAMPLES) == \
            [(100.5, 1), (101.0, 2), (102.0, 3), (107.0, -4)]
    assert reader_conn.execute("SELECT project, experiment_name FROM runs").fetchall() == [("p", "e")]
    if version < 2:  # runs.max_span_ns backfilled from the spans
        assert reader_conn.execute("SELECT max_span_ns FROM runs").fetchone()[0] == 5
    if version < 8:  # the spans stored before the summary are marked for it (or already summarized)
        marked = reader_conn.execute("SELECT count(*) FROM span_lod_dirty").fetchone()[0]
        built = reader_conn.execute("SELECT count(*) FROM span_lod").fetchone()[0]
        assert marked + built >= 1


def _write_after(where: Any) -> None:
    w = RunStoreWriter(where)
    try:
        w.put_samples([SampleRow("p", "e", "reward", "gauge", "{}", 3.0, 104.0, 1.5)])
        assert w.flush(10)
    finally:
        w.close()


# ------------------------------------------------------------------ SQLite
def _sqlite_shape(path: Path) -> dict[str, Any]:
    """Every table's columns (name, type, not null, default, key position) and every index's (unique, partial,
    columns), by name: what a query or a constraint could notice."""
    c = sqlite3.connect(path)
    try:
        tables = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        shape: dict[str, Any] = {}
        for t in tables:
            shape[t] = {r[1]: (r[2], r[3], r[4], r[5]) for r in c.execute(f"PRAGMA table_info({t})")}
            for _, name, unique, origin, partial in c.execute(f"PRAGMA index_list({t})"):
                cols = [r[2] for r in c.execute(f"PRAGMA index_info({name})")]
                shape[f"index {name}" if origin != "pk" else f"{t} key"] = (unique, partial, cols)
        return shape
    finally:
        c.close()


@pytest.mark.parametrize("version", SQLITE_VERSIONS)  # (today's too: its dump is what a fresh store holds)
def test_a_sqlite_store_of_each_released_version_becomes_todays(tmp_path: Path, version: int) -> None:
    fresh = tmp_path / "fresh.sqlite"
    open_backend(fresh).connect().close()
    old = tmp_path / "old.sqlite"
    c = sqlite3.connect(old, isolation_level=None)
    c.executescript((SCHEMAS / "sqlite" / f"v{version}.sql").read_text())
    _old_rows(c, version, "?")
    c.execute(f"PRAGMA application_id={APPLICATION_ID}")
    c.execute(f"PRAGMA user_version={version}")
    c.close()

    open_backend(old).connect().close()

    assert sqlite3.connect(old).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert _sqlite_shape(old) == _sqlite_shape(fresh)
    _check_upgraded(RunStoreReader(old).conn(), version)
    _write_after(old)
    assert {m["name"]: m["samples"] for m in q.metric_names(RunStoreReader(old).conn(), 1)}["reward"] == 4


def test_a_sqlite_upgrade_that_fails_leaves_the_store_at_its_version(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    old = tmp_path / "old.sqlite"
    c = sqlite3.connect(old, isolation_level=None)
    c.executescript((SCHEMAS / "sqlite" / "v8.sql").read_text())
    _old_rows(c, 8, "?")
    c.execute(f"PRAGMA application_id={APPLICATION_ID}")
    c.execute("PRAGMA user_version=8")
    c.close()
    broken = migrations.Step(SCHEMA_VERSION, "fails", (migrations.Run("UPDATE no_such_table SET x = 1"),))
    monkeypatch.setattr(migrations, "STEPS", (*migrations.STEPS[:-1], broken))
    with pytest.raises(Exception, match="no_such_table"):
        open_backend(old).connect()
    c = sqlite3.connect(old)
    assert c.execute("PRAGMA user_version").fetchone()[0] == 8  # one transaction: no step of it stayed
    assert "n_samples" not in {r[1] for r in c.execute("PRAGMA table_info(series)")}
    assert c.execute("SELECT count(*) FROM samples WHERE series_id = 1").fetchone()[0] == 3
    monkeypatch.undo()
    open_backend(old).connect().close()  # and the real chain then goes through
    _check_upgraded(RunStoreReader(old).conn(), 8)


# ------------------------------------------------------------------ PostgreSQL
def _raw(url: str) -> psycopg.Connection:
    return psycopg.connect(url, password=PASSWORD, autocommit=True)


def _postgres_shape(url: str) -> dict[str, Any]:
    with _raw(url) as c:
        columns = c.execute("SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity "
                            "FROM information_schema.columns WHERE table_schema = current_schema()").fetchall()
        index_rows = c.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()")
        indexes = {name: re.sub(r"\s+", " ", d) for name, d in index_rows}
    return {"columns": sorted(columns), "indexes": indexes}


@pytest.mark.parametrize("version", POSTGRES_VERSIONS)
def test_a_postgres_store_of_each_released_version_becomes_todays(postgres_cluster: Any, postgres_url: str,
                                                                 version: int) -> None:
    fresh_url = postgres_cluster.url(postgres_cluster.create_database())
    open_backend(parse_store(fresh_url, Path("."))).connect().close()
    with _raw(postgres_url) as c:
        c.execute((SCHEMAS / "postgres" / f"v{version}.sql").read_text().split("\n", 1)[1])
        c.execute("INSERT INTO rl_insight_meta VALUES ('application', 'rl-insight run store'), "
                  "('schema_version', %s)", (str(version),))
        _old_rows(c, version, "%s")
    where = parse_store(postgres_url, Path("."))

    open_backend(where).connect().close()

    with _raw(postgres_url) as c:
        assert c.execute("SELECT value FROM rl_insight_meta WHERE key = 'schema_version'").fetchone()[0] == \
            str(SCHEMA_VERSION)
    assert _postgres_shape(postgres_url) == _postgres_shape(fresh_url)
    _check_upgraded(RunStoreReader(where).conn(), version)
    _write_after(where)
    assert {m["name"]: m["samples"] for m in q.metric_names(RunStoreReader(where).conn(), 1)}["reward"] == 4

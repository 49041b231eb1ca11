"""`insert_rows`, each engine's bulk write (backend/sqlite_rows.py: VALUES lists; backend/postgres_rows.py: one
array a column): the same table and the same count as `executemany` of the one-row statement, on both engines."""

from __future__ import annotations

import pytest

from rl_insight.server.runstore.backend import StoreConnection, StoreLocation, open_backend, postgres_rows, sqlite_rows
from rl_insight.server.runstore.backend.sqlite import SqliteConnection

TABLE = "CREATE TABLE {t} (k INTEGER PRIMARY KEY, v TEXT, n INTEGER NOT NULL DEFAULT 0, x REAL)"
IGNORE = "INSERT INTO {t} (k, v, x) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
UPSERT = ("INSERT INTO {t} (k, v, n, x) VALUES (?, ?, 1, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v, "
          "n = {t}.n + 1, x = excluded.x")


def _tables(store_at: StoreLocation) -> StoreConnection:
    conn = open_backend(store_at).connect()
    for t in ("ta", "tb"):
        conn.execute(TABLE.format(t=t).replace("INTEGER PRIMARY KEY", "BIGINT PRIMARY KEY"))
        conn.execute(f"INSERT INTO {t} (k, v) VALUES (7, 'old')")
    return conn


@pytest.mark.parametrize("sql", [IGNORE, UPSERT])
@pytest.mark.parametrize("count", [0, 1, 2, 3, 257, 1000])
def test_same_table_and_count_as_executemany(store_at: StoreLocation, sql: str, count: int) -> None:
    # keys repeat inside one call's rows, and meet a stored row: later rows meet earlier ones as executemany's do;
    # the REAL column gets ints, floats and NULLs mixed (PostgreSQL's arrays hold one type)
    rows = [(i % 300, f"v{i}", None if i % 5 == 0 else (i if i % 2 else i + 0.5)) for i in range(count)]
    conn = _tables(store_at)
    try:
        changed = conn.insert_rows(sql.format(t="ta"), rows)
        expected = conn.executemany(sql.format(t="tb"), rows).rowcount if rows else 0
        assert changed == expected
        assert (conn.execute("SELECT * FROM ta ORDER BY k").fetchall()
                == conn.execute("SELECT * FROM tb ORDER BY k").fetchall())
    finally:
        conn.close()


def test_values_that_fit_no_column_fail_the_statement(store_at: StoreLocation) -> None:
    # (the writer then writes the batch's items one at a time and counts the one it cannot store)
    conn = _tables(store_at)
    try:
        with pytest.raises(Exception):
            conn.insert_rows(IGNORE.format(t="ta"), [(1, "a", 1.0), (2**70, "b", 2.0)])
    finally:
        conn.close()


def test_sqlite_writes_few_statements_for_many_rows() -> None:
    import sqlite3
    c = sqlite3.connect(":memory:", isolation_level=None, factory=SqliteConnection)
    c.execute(TABLE.format(t="t"))
    steps: list[str] = []
    c.set_trace_callback(steps.append)
    c.insert_rows(IGNORE.format(t="t"), [(i, "x", 1.0) for i in range(1000)])
    assert len(steps) == 3 + 1 + 1 + 1 + 1  # 1000 = 256 * 3 + 128 + 64 + 32 + 8
    assert c.execute("SELECT count(*) FROM t").fetchone()[0] == 1000


def test_sqlite_chunks_respect_the_parameter_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3
    monkeypatch.setattr(sqlite_rows, "MAX_PARAMETERS", 6)  # 2 three-column rows at most
    c = sqlite3.connect(":memory:", isolation_level=None, factory=SqliteConnection)
    c.execute(TABLE.format(t="t"))
    steps: list[str] = []
    c.set_trace_callback(steps.append)
    assert c.insert_rows(IGNORE.format(t="t"), [(i, "x", 1.0) for i in range(5)]) == 5
    assert len(steps) == 3  # 2 + 2 + 1


def test_sqlite_refuses_a_statement_without_one_values_row() -> None:
    with pytest.raises(ValueError, match="VALUES"):
        sqlite_rows.expanded("UPDATE t SET v = ? WHERE k = ?", 4)


def test_sqlite_cte_values_list_feeds_an_insert_select() -> None:
    import sqlite3
    c = sqlite3.connect(":memory:", isolation_level=None, factory=SqliteConnection)
    c.execute(TABLE.format(t="t"))
    c.execute("CREATE TABLE seen (k INTEGER PRIMARY KEY)")
    c.executemany("INSERT INTO t (k, v) VALUES (?, 'x')", [(1,), (3,)])
    sql = ("WITH sent (k) AS (VALUES (?)) INSERT INTO seen (k) SELECT t.k FROM sent JOIN t ON t.k = sent.k "
           "WHERE true ON CONFLICT DO NOTHING")
    c.insert_rows(sql, [(1,), (2,), (3,), (3,)])  # (sqlite3 counts no rows for a statement opening with WITH)
    assert c.execute("SELECT k FROM seen ORDER BY k").fetchall() == [(1,), (3,)]


def test_postgres_reads_a_one_row_insert_as_arrays() -> None:
    form = postgres_rows.read_insert(
        "INSERT INTO t (k, v, n) VALUES (%s, %s, 1) ON CONFLICT(k) DO UPDATE SET v = excluded.v")
    assert form is not None and form.bound == ("k", "v") and form.key == (0,)
    text = form.statement({"k": "bigint", "v": "text", "n": "bigint"})
    assert text == ("INSERT INTO t (k, v, n) SELECT v.c0, v.c1, 1 FROM unnest(%s::bigint[], %s::text[]) AS v(c0, c1) "
                    "ON CONFLICT(k) DO UPDATE SET v = excluded.v")
    # what it cannot read runs row by row: a CTE, no column list, a quoted literal (it could hold a comma)
    assert postgres_rows.read_insert("WITH s (k) AS (VALUES (%s)) INSERT INTO t (k) SELECT k FROM s") is None
    assert postgres_rows.read_insert("INSERT INTO t VALUES (%s, %s)") is None
    assert postgres_rows.read_insert("INSERT INTO t (k, v) VALUES (%s, 'a,b')") is None


def test_postgres_cuts_rows_before_a_conflict_key_repeats() -> None:
    rows = [(1, "a"), (2, "b"), (1, "c"), (3, "d"), (1, "e"), (2, "f")]
    assert postgres_rows.unique_key_runs(rows, (0,)) == [rows[:2], rows[2:4], rows[4:]]
    assert postgres_rows.unique_key_runs(rows, ()) == [rows]


def test_an_upsert_says_which_rows_it_wrote(store_at: StoreLocation) -> None:
    # WHERE keeps a stored row whose v is 'keep'; a key twice in one call: each row answered for itself
    sql = ("INSERT INTO ta (k, v, x) VALUES (?, ?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v, x = excluded.x "
           "WHERE ta.v <> 'keep'")
    conn = _tables(store_at)
    try:
        conn.execute("INSERT INTO ta (k, v) VALUES (1, 'keep')")
        rows = [(1, "a", 1.0), (2, "b", 2), (7, "c", None), (2, "keep", 3.5), (2, "d", 4.0), (9, "e", 5.0)]
        assert conn.insert_rows_written(sql, rows) == [False, True, True, True, False, True]
        got = conn.execute("SELECT k, v, x FROM ta ORDER BY k").fetchall()
        assert [tuple(r) for r in got] == [(1, "keep", None), (2, "keep", 3.5), (7, "c", None), (9, "e", 5.0)]
    finally:
        conn.close()

"""bulk.write_rows: the same rows, order and counts as executemany, in few statements (runstore/bulk.py)."""

from __future__ import annotations

import sqlite3

import pytest

from rl_insight.server.runstore import bulk
from rl_insight.server.runstore.backend.sqlite import SqliteConnection


def _table() -> sqlite3.Connection:
    c = sqlite3.connect(":memory:", isolation_level=None, factory=SqliteConnection)
    c.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT, n INTEGER NOT NULL DEFAULT 0)")
    return c


IGNORE = "INSERT INTO t (k, v) VALUES (?, ?) ON CONFLICT DO NOTHING"
UPSERT = "INSERT INTO t (k, v, n) VALUES (?, ?, 1) ON CONFLICT (k) DO UPDATE SET v = excluded.v, n = t.n + 1"


@pytest.mark.parametrize("sql", [IGNORE, UPSERT])
@pytest.mark.parametrize("count", [0, 1, 2, 3, 255, 256, 257, 1000])
def test_same_table_and_count_as_executemany(sql: str, count: int) -> None:
    # keys repeat inside one statement's rows and across chunks: later rows meet earlier ones as executemany's do
    rows = [(i % 300, f"v{i}") for i in range(count)]
    a, b = _table(), _table()
    a.execute("INSERT INTO t (k, v) VALUES (7, 'old')")
    b.execute("INSERT INTO t (k, v) VALUES (7, 'old')")
    changed = bulk.write_rows(a, sql, rows)
    expected = b.executemany(sql, rows).rowcount if rows else 0
    assert changed == expected
    assert a.execute("SELECT * FROM t ORDER BY k").fetchall() == b.execute("SELECT * FROM t ORDER BY k").fetchall()


def test_few_statements_for_many_rows() -> None:
    c = _table()
    steps: list[str] = []
    c.set_trace_callback(steps.append)
    bulk.write_rows(c, IGNORE, [(i, "x") for i in range(1000)])
    assert len(steps) == 3 + 1 + 1 + 1 + 1  # 1000 = 256 * 3 + 128 + 64 + 32 + 8
    assert c.execute("SELECT count(*) FROM t").fetchone()[0] == 1000


def test_chunks_respect_the_parameter_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "MAX_PARAMETERS", 6)  # 3 two-column rows at most: chunks of 2 (a power of two)
    c = _table()
    steps: list[str] = []
    c.set_trace_callback(steps.append)
    assert bulk.write_rows(c, IGNORE, [(i, "x") for i in range(5)]) == 5
    assert len(steps) == 3  # 2 + 2 + 1


def test_a_statement_without_one_values_row_is_refused() -> None:
    with pytest.raises(ValueError, match="VALUES"):
        bulk.expanded("UPDATE t SET v = ? WHERE k = ?", 4)


def test_a_cte_values_list_feeds_an_insert_select() -> None:
    c = _table()
    c.execute("CREATE TABLE seen (k INTEGER PRIMARY KEY)")
    c.executemany("INSERT INTO t (k, v) VALUES (?, 'x')", [(1,), (3,)])
    sql = ("WITH sent (k) AS (VALUES (?)) INSERT INTO seen (k) SELECT t.k FROM sent JOIN t ON t.k = sent.k "
           "WHERE true ON CONFLICT DO NOTHING")
    bulk.write_rows(c, sql, [(1,), (2,), (3,), (3,)])  # (sqlite3 counts no rows for a statement opening with WITH)
    assert c.execute("SELECT k FROM seen ORDER BY k").fetchall() == [(1,), (3,)]

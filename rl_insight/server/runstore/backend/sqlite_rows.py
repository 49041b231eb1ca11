"""Many rows in few statements on SQLite: a one-row insert run for a list of rows as multi-row `VALUES` lists
(`SqliteConnection.insert_rows`; postgres_rows.py is PostgreSQL's).

Why: Python's sqlite3 releases the GIL around every `sqlite3_step`, and `executemany` steps once a row. The writer
thread shares the GIL with the event loop; each release hands the GIL to the loop, and taking it back waits until
the loop lets go (up to the switch interval). Measured in one process (bench/RESULTS.md, "the writer's GIL
hand-overs"): the writer alone spent 0.30 ms a batch, the same writer beside the event loop 0.8-0.9 ms wall for
0.3-0.4 ms of CPU; the rest was waiting for the GIL, a row at a time. A statement of up to `CHUNK_ROWS` rows steps
once, so a transaction of thousands of rows gives the GIL away a few times instead of thousands.

Invariants: the same rows in the same order as `executemany` (SQLite applies a `VALUES` list row by row, so a
later row that conflicts with an earlier one of the same statement meets it exactly as it would in the next
statement: `DO NOTHING` skips it, `DO UPDATE` updates it); the returned count is the rows changed, as
`executemany(...).rowcount` says it. Chunks are powers of two, so a statement has at most log2(CHUNK_ROWS) + 1
forms and sqlite3's statement cache keeps them compiled.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Sequence

from .dialect import StoreConnection

CHUNK_ROWS = 256  # rows a statement at most: 1 GIL hand-over where executemany made 256
MAX_PARAMETERS = 32_766  # SQLite's default SQLITE_MAX_VARIABLE_NUMBER since 3.32
# the one row tuple after VALUES (its parentheses may hold literals, never a nested parenthesis)
_ROW = re.compile(r"\bVALUES\s*(\([^()]*\))", re.IGNORECASE)


@lru_cache(maxsize=256)
def expanded(sql: str, rows: int) -> str:
    """`sql` (one `VALUES (…)` row) with that row's tuple repeated `rows` times."""
    m = _ROW.search(sql)
    if m is None:
        raise ValueError(f"not a one-row VALUES statement: {sql[:80]!r}")
    return sql[: m.start(1)] + ", ".join([m.group(1)] * rows) + sql[m.end(1):]


def insert_rows(conn: StoreConnection, sql: str, rows: Sequence[Sequence[Any]]) -> int:
    """Run `sql` (an INSERT of one `VALUES (…)` row, or a statement whose first `VALUES (…)` is a CTE's row) for
    every row; the rows it changed (sqlite3 counts none for a statement that opens with WITH: 0 then)."""
    if not rows:
        return 0
    if len(rows) == 1:
        return int(conn.executemany(sql, rows).rowcount)
    width = len(rows[0])
    most = 1 << (max(1, min(CHUNK_ROWS, MAX_PARAMETERS // max(1, width))).bit_length() - 1)  # a power of two
    changed = 0
    i, n = 0, len(rows)
    while i < n:
        k = most
        while k > n - i:
            k //= 2
        chunk = rows[i:i + k]
        params = [v for row in chunk for v in row]
        changed += max(0, conn.execute(expanded(sql, k), params).rowcount)
        i += k
    return changed

"""Many rows in one statement on PostgreSQL: a one-row `INSERT … VALUES (…)` run for a list of rows as
`INSERT … SELECT … FROM unnest(%s::type[], …)`, one array a column.

Why: psycopg's `executemany` pipelines a Bind/Execute per row, and both sides pay per row: the writer ~17 µs of
Python per row to build and dump it, the server an executor start per row. At 1,000 clients (20 samples and 5 spans a
batch each, one transaction every ~10-25 ms) the writer spent 21 ms a transaction of 25 batches where SQLite spent
6 (bench/RESULTS.md, "PostgreSQL at SQLite's pace"). A statement with one array a column is the same text whatever
the row count, so psycopg prepares it once; its rows cross as a few binary arrays.

Invariants (the same as `executemany` of the one-row statement, which tests/…/backend/test_insert_rows.py checks
on both engines):
- the same rows in the same order: `unnest` yields its arrays' elements in order and the plan inserts them as read,
  so of two rows with one key `ON CONFLICT DO NOTHING` keeps the first, as a row at a time would;
- a `DO UPDATE` statement never meets one key twice (PostgreSQL refuses "cannot affect row a second time"): the
  rows are cut before a key repeats and each run is a statement of its own, so a later row updates the row an
  earlier statement wrote, as it would a row at a time;
- the count returned is the rows inserted or updated, as `executemany(...).rowcount` says;
- each array holds one type: a column's values are converted to its type in Python (an int sent to a REAL column,
  a bool to a BIGINT one), as PostgreSQL converts a one-row statement's parameter on assignment.
A statement this module cannot read (no column list, a nested parenthesis in its row, a CTE) runs as
`executemany`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

# the PostgreSQL text translate.to_postgres makes of the store's one-row inserts
_INSERT = re.compile(r"^\s*INSERT INTO (\w+)\s*\(([^()]*)\)\s*VALUES\s*\(([^()]*)\)(.*)$", re.IGNORECASE | re.DOTALL)
_CONFLICT_KEY = re.compile(r"ON CONFLICT\s*\(([^()]*)\)\s*DO UPDATE", re.IGNORECASE)


@dataclass(frozen=True)
class ArrayInsert:
    """A one-row insert read for arrays: its table, its columns, which of them take a parameter (the rest are
    literals of the statement), and the positions in a row of its `DO UPDATE` conflict key (empty: none)."""

    table: str
    columns: tuple[str, ...]
    values: tuple[str, ...]  # each column's item in the VALUES row: "%s" or a literal
    tail: str  # ON CONFLICT … after the row
    key: tuple[int, ...]

    @property
    def bound(self) -> tuple[str, ...]:
        """The columns a row's values fill, in the row's order."""
        return tuple(c for c, v in zip(self.columns, self.values) if v == "%s")

    @property
    def key_columns(self) -> tuple[str, ...]:
        """The `DO UPDATE` conflict key's columns (what `insert_rows_written` returns of each row written)."""
        return tuple(self.bound[i] for i in self.key)

    def statement(self, types: dict[str, str]) -> str:
        bound = self.bound
        arrays = ", ".join(f"%s::{types[c]}[]" for c in bound)
        names = [f"c{i}" for i in range(len(bound))]
        selected, i = [], 0
        for v in self.values:
            if v == "%s":
                selected.append(f"v.{names[i]}")
                i += 1
            else:
                selected.append(v)
        return (f"INSERT INTO {self.table} ({', '.join(self.columns)}) SELECT {', '.join(selected)} "
                f"FROM unnest({arrays}) AS v({', '.join(names)}){self.tail}")


@lru_cache(maxsize=256)
def read_insert(text: str) -> ArrayInsert | None:
    """`text` (PostgreSQL's dialect, `%s` placeholders) read as a one-row insert, or None when it is not one."""
    m = _INSERT.match(text)
    if m is None:
        return None
    table, columns, row, tail = m.group(1), m.group(2), m.group(3), m.group(4)
    cols = tuple(c.strip() for c in columns.split(","))
    values = tuple(v.strip() for v in row.split(","))
    if len(cols) != len(values) or any("'" in v for v in values):  # (a quoted literal could hold a comma)
        return None
    key: tuple[int, ...] = ()
    k = _CONFLICT_KEY.search(tail)
    if k is not None:
        bound = [c for c, v in zip(cols, values) if v == "%s"]
        names = [c.strip() for c in k.group(1).split(",")]
        if any(n not in bound for n in names):
            return None  # a key column set by a literal: every row has the same, so rows go one at a time
        key = tuple(bound.index(n) for n in names)
    return ArrayInsert(table, cols, values, (" " + tail.strip()) if tail.strip() else "", key)


# PostgreSQL's name of a column's type (format_type) → how a value is made that type's Python kind for an array
def _as_float(v: Any) -> Any:
    return None if v is None else float(v)


def _as_int(v: Any) -> Any:
    return None if v is None else int(v)


_CONVERT: dict[str, Callable[[Any], Any]] = {
    "double precision": _as_float, "real": _as_float, "bigint": _as_int, "integer": _as_int, "smallint": _as_int,
}


def unique_key_runs(rows: Sequence[Sequence[Any]], key: tuple[int, ...]) -> list[Sequence[Sequence[Any]]]:
    """`rows` cut, in order, into runs in which no key repeats (one run when none does, the common case)."""
    if not key:
        return [rows]
    runs: list[Sequence[Sequence[Any]]] = []
    seen: set[tuple[Any, ...]] = set()
    start = 0
    for i, row in enumerate(rows):
        k = tuple(row[j] for j in key)
        if k in seen:
            runs.append(rows[start:i])
            seen.clear()
            start = i
        seen.add(k)
    runs.append(rows[start:])
    return runs


def columns_of(rows: Sequence[Sequence[Any]], types: Sequence[str]) -> list[list[Any]]:
    """The rows as one list a column, each value converted to its column's type."""
    out: list[list[Any]] = []
    for j, values in enumerate(zip(*rows)):
        convert = _CONVERT.get(types[j])
        if convert is None:
            out.append(list(values))
        elif convert is _as_float:
            kinds = set(map(type, values))
            out.append(list(values) if kinds <= {float, type(None)} else [_as_float(v) for v in values])
        else:
            kinds = set(map(type, values))
            out.append(list(values) if kinds <= {int, type(None)} else [_as_int(v) for v in values])
    return out

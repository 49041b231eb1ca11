"""The shape of a store connection, and what the run store's queries may ask of the engine they run on:
capabilities and the few expressions that have no common spelling, never the engine's name.

Every connection a backend opens carries its `Dialect` (`conn.dialect`), so a query module that needs one of these
asks the connection it was given and stays free of "which backend is this?". The SQL itself is written once, in
SQLite's dialect; PostgreSQL's backend translates it (translate.py). What translation cannot know lives here.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Protocol, Sequence


class StoreConnection(Protocol):
    """What every backend's connection is, and what the query modules are typed against: statements in SQLite's
    dialect with `?` (or `:name`) placeholders, tuples back, explicit BEGIN/COMMIT (autocommit otherwise), a cursor
    from `execute` (`fetchone`, `fetchall`, iteration, `rowcount`, `description`), and its engine's `Dialect`."""

    @property
    def dialect(self) -> Dialect: ...

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, parameters: Sequence[Any] | dict[str, Any] = ..., /) -> Any: ...

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Any: ...

    def insert_rows(self, sql: str, rows: Sequence[Sequence[Any]], /) -> int:
        """`sql`, an INSERT of one `VALUES (…)` row, for every row, in as few statements as the engine writes
        fastest, with `executemany`'s result: the same rows stored in the same order, the rows changed counted."""
        ...

    def insert_rows_written(self, sql: str, rows: Sequence[Sequence[Any]], /) -> list[bool]:
        """`insert_rows` of an upsert whose `DO UPDATE` has a WHERE, saying for each row whether it was inserted or
        updated (False: the WHERE kept the stored row)."""
        ...

    def close(self) -> None: ...


class Dialect:
    """The embedded engine's answers (SQLite); PostgresDialect overrides what differs."""

    name = "sqlite"
    # every statement is a round trip to a server: fewer, larger statements win (one per lane batch, arrays of
    # keys, rows as arrays); in process, one statement costs a GIL hand-over, not a round trip
    remote = False
    # SELECT DISTINCT ON (…): a row per group, the first by the ORDER BY (SQLite returns the row of a bare
    # MIN()/MAX() column instead)
    distinct_on = False
    # the planner reads a CTE's rows first only when told (AS MATERIALIZED); SQLite's planner picks that join
    # order itself
    fence_ctes = False

    def json_attribute(self, key: str) -> tuple[str, Any]:
        """SQL reading attribute `key` of a span's `attributes` JSON, and the parameter it binds."""
        return "json_extract(attributes, ?)", "$." + json.dumps(key)  # (quoted: any name is a valid path key)

    def index_hint(self, index: str) -> str:
        """A clause after `FROM table` that makes the planner use `index` (empty where the planner finds it)."""
        return f"INDEXED BY {index}"

    def lock_rows(self, conn: StoreConnection, table: str, ids: Sequence[int]) -> None:
        """Lock rows `ids` of `table` for this transaction, in id order. The SQLite writer holds the whole file's
        write lock already: nothing to do."""

    def rows_for_ids(self, conn: StoreConnection, sql: str, args: Sequence[Any], ids: Sequence[Any]) -> list[Any]:
        """Rows of `sql` (SQLite's dialect with `?` placeholders, where `{ids}` stands for a membership test such
        as `id {ids}`) with `args` bound before the ids."""
        out: list[Any] = []
        for i in range(0, len(ids), 500):
            part = list(ids[i:i + 500])
            out += conn.execute(sql.format(ids=f"IN ({','.join('?' * len(part))})"), (*args, *part)).fetchall()
        return out


SQLITE = Dialect()

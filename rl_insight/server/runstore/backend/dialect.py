"""What the run store's queries may ask of the engine they run on: capabilities and the few expressions that have no
common spelling, never the engine's name.

Every connection a backend opens carries its `Dialect` (`conn.dialect`), so a query module that needs one of these
asks the connection it was given and stays free of "which backend is this?". The SQL itself is written once, in
SQLite's dialect; PostgreSQL's backend translates it (translate.py). What translation cannot know lives here.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Sequence, cast

from .types import StoreConnection

if TYPE_CHECKING:
    from .postgres import PgConnection


class Dialect:
    """The embedded engine's answers (SQLite); PostgresDialect overrides what differs."""

    name = "sqlite"
    # every statement is a round trip to a server: fewer, larger statements win (one per lane batch, arrays of
    # keys, executemany pipelined); in process, one statement costs a GIL hand-over, not a round trip
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


class PostgresDialect(Dialect):
    name = "postgresql"
    remote = True
    distinct_on = True
    # (its planner, costing each trajectory's turn lookup high, scanned a run's trajectories in parallel by key
    # instead of a step's index: 150 vs 120 ms at 600k trajectories)
    fence_ctes = True

    def json_attribute(self, key: str) -> tuple[str, Any]:
        return "CAST(attributes AS JSONB) -> ?", key

    def index_hint(self, index: str) -> str:
        return ""

    def lock_rows(self, conn: StoreConnection, table: str, ids: Sequence[int]) -> None:
        """Another server's transaction on these rows waits here, or this one on it (in id order: no deadlock)."""
        if ids:
            sql = f"SELECT id FROM {table} WHERE id = ANY(%s) ORDER BY id FOR UPDATE"
            cast("PgConnection", conn).native(sql, (list(ids),))

    def rows_for_ids(self, conn: StoreConnection, sql: str, args: Sequence[Any], ids: Sequence[Any]) -> list[Any]:
        """One statement with the ids as one array, planned for this call (a generic plan for an array of unknown
        length read every row of the run)."""
        text = sql.format(ids="= ANY(?)").replace("?", "%s")
        return list(cast("PgConnection", conn).native(text, (*args, list(ids)), prepare=False).fetchall())


SQLITE = Dialect()
POSTGRES = PostgresDialect()

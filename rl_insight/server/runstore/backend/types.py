"""The shapes every backend's connection and cursor have: what the query modules are typed against.

A SQLite connection (sqlite.py's `SqliteConnection`, a `sqlite3.Connection`) and a PostgreSQL one (postgres.py's
`PgConnection`) both read this way: statements in SQLite's dialect with `?` (or `:name`) placeholders, tuples back,
explicit BEGIN/COMMIT (autocommit otherwise), a cursor back from `execute` (`fetchone`, `fetchall`, iteration,
`rowcount`, `description`), and the engine's `Dialect` for what has no common spelling.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Protocol, Sequence

if TYPE_CHECKING:
    from .dialect import Dialect


class StoreConnection(Protocol):
    @property
    def dialect(self) -> Dialect: ...

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, parameters: Sequence[Any] | dict[str, Any] = ..., /) -> Any: ...

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Any: ...

    def close(self) -> None: ...

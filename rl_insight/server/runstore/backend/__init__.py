"""The run store's engine behind one interface: a SQLite file (the embedded default), a PostgreSQL database, or
SQLite on memory (memory.py: tests, a server that keeps nothing), chosen once from the store's location.

`open_backend(location)` returns the backend; `AppState` opens it once and hands it to the writer, the readers and
the fleet; a child process (the writer's, the insight rounds') opens its own from the location it is sent. Outside
this package no code asks which engine it runs on: a backend answers what differs (connecting, creating and
upgrading the schema through migrations.py's one chain, sizes, failure classification, checkpoints, session locks),
and the connection it opens carries its `Dialect` for what a query cannot write once.

Adding an engine: a module here with a class that has `Backend`'s members, a `Dialect` subclass, and a line in
`open_backend`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .dialect import Dialect, StoreConnection
from .location import StoreLocation, sqlite_location
from .schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from .checkpoints import Checkpointer

__all__ = ["SCHEMA_VERSION", "Backend", "Dialect", "StoreConnection", "StoreLocation", "open_backend"]


class SessionLock(Protocol):
    """A lock held by a connection of its own until released or until that connection goes (the fleet's lease)."""

    @property
    def closed(self) -> bool: ...

    def try_take(self) -> bool: ...

    def ping(self) -> None: ...

    def release(self) -> None: ...

    def close(self) -> None: ...


class Backend(Protocol):
    location: StoreLocation
    dialect: Dialect
    shared: bool  # several servers may write it at once (a fleet)

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        """The engine's own exception classes (a failed statement, a lost connection)."""
        ...

    def check_available(self) -> None:
        """MissingExtraError when what the engine needs is not installed."""

    def connect(self, *, readonly: bool = False) -> StoreConnection:
        """A connection; unless `readonly`, the schema created or upgraded first. StoreError for a store that is not
        ours, is newer or is damaged (nothing in it changed); StoreUnavailableError when it cannot be reached."""
        ...

    def checkpointer(self, conn: StoreConnection) -> Checkpointer | None:
        """What takes the writer's (`conn`) checkpoints off its commits, if the engine needs one."""
        ...

    def integrity_deferred(self) -> bool:
        """Whether opening skipped the integrity check (too large), for the writer to run in the background."""
        ...

    def check_integrity(self) -> str:
        """'ok' or the first problem found."""
        ...

    def used_bytes(self, conn: StoreConnection) -> int:
        """What the store's data takes now (retention's size bound)."""
        ...

    def run_bytes(self, conn: StoreConnection, run_id: int) -> int | None:
        """What deleting the run frees, where measuring again after the deletion is dear; else None."""
        ...

    def is_storage_failure(self, exc: BaseException) -> bool:
        """The store itself failed (disk, server, connection), not one item: item by item would not help."""
        ...

    def is_transient(self, exc: BaseException) -> bool:
        """The transaction lost to another's and the same transaction again will go through."""
        ...

    def has_table(self, conn: StoreConnection, table: str) -> bool: ...

    def session_lock(self, key: int) -> SessionLock:
        """A lock `key` on a connection of its own (StoreError where the store is one server's)."""
        ...


def open_backend(where: Backend | StoreLocation | Path | str) -> Backend:
    """The backend of `where` (a location, or a SQLite file's path); a backend is returned as it is. Connects to
    nothing: `connect` does."""
    if not isinstance(where, (StoreLocation, Path, str)):
        return where
    location = where if isinstance(where, StoreLocation) else sqlite_location(where)
    if location.kind == "postgresql":
        from .postgres import PostgresBackend

        return PostgresBackend(location)
    if location.kind == "memory":
        from .memory import MemoryBackend

        return MemoryBackend(location)
    from .sqlite import SqliteBackend

    return SqliteBackend(location)


"""The run store in memory: SQLite's `memdb` VFS, shared by every connection of this process that names the same
store — for tests and for embedding a server that keeps nothing (the writer then runs in a thread: a child process
would see a store of its own). The store kinds' contract test runs against it beside the SQLite file and PostgreSQL.

Invariants: the store lives from its first connection until `forget_memory_store(name)` (a connection kept here
holds it, so a writer closing and a new one opening find the same data); it is private to this process. There is
no WAL in memory: a reader waits for the writer's commit (the busy timeout) instead of reading beside it.
"""

from __future__ import annotations

import sqlite3
import threading

from ....errors import StoreError
from .checkpoints import Checkpointer
from .dialect import StoreConnection
from .location import StoreLocation
from .schema import SCHEMA_VERSION
from .sqlite import SqliteBackend, SqliteConnection, _upgrade, quick_check

SCHEME = "memory://"
_kept: dict[str, SqliteConnection] = {}  # name -> the connection that keeps its store alive
_lock = threading.Lock()


def memory_location(name: str) -> StoreLocation:
    """The location of the in-memory store `name` (letters, digits, `-`, `_`)."""
    if not name or not name.replace("-", "").replace("_", "").isalnum() or len(name) > 64:
        raise StoreError("an in-memory store's name is letters, digits, '-' and '_' (at most 64)")
    return StoreLocation("memory", url=SCHEME + name)


def forget_memory_store(name: str) -> None:
    """Free the store `name` (its data goes once the last connection to it closes)."""
    with _lock:
        conn = _kept.pop(name, None)
    if conn is not None:
        conn.close()


class MemoryBackend(SqliteBackend):
    """SQLite's engine on memory: every statement and answer as the file's; no file, no checkpoints."""

    def __init__(self, location: StoreLocation) -> None:  # (no path: the SQLite backend's file checks do not apply)
        assert location.url is not None and location.url.startswith(SCHEME)
        self.location = location
        self.name = location.url[len(SCHEME):]

    def connect(self, *, readonly: bool = False) -> SqliteConnection:
        conn = sqlite3.connect(f"file:/rl-insight-{self.name}?vfs=memdb", uri=True, check_same_thread=False,
                               isolation_level=None, timeout=30, factory=SqliteConnection)
        with _lock:
            if self.name not in _kept:  # the first connection creates the schema and keeps the store alive
                _upgrade(conn, 0)
                conn.execute("PRAGMA foreign_keys=ON")
                _kept[self.name] = conn
                conn = sqlite3.connect(f"file:/rl-insight-{self.name}?vfs=memdb", uri=True, check_same_thread=False,
                                       isolation_level=None, timeout=30, factory=SqliteConnection)
        if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
            conn.close()
            raise StoreError(f"in-memory store {self.name} is not at schema version {SCHEMA_VERSION}")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA temp_store=MEMORY")
        return conn

    def checkpointer(self, conn: StoreConnection) -> Checkpointer | None:
        return None  # (no WAL)

    def integrity_deferred(self) -> bool:
        return False

    def check_integrity(self) -> str:
        conn = self.connect()
        try:
            return quick_check(conn)
        finally:
            conn.close()

"""Read connections for request handlers: one per thread (SQLite connections are not shared across threads,
and a PostgreSQL connection runs one statement at a time), opened lazily; WAL (SQLite) and MVCC (PostgreSQL) let
them read while the writer commits. A PostgreSQL connection found broken is opened again."""

from __future__ import annotations

import threading
from pathlib import Path

from .backend import Backend, StoreConnection, StoreLocation, open_backend


class RunStoreReader:
    def __init__(self, where: Backend | StoreLocation | Path) -> None:
        self.backend = open_backend(where)
        self.location = self.backend.location
        self.path = self.location.display
        self._local = threading.local()

    def conn(self) -> StoreConnection:
        c = getattr(self._local, "conn", None)
        if c is None or getattr(c, "closed", False):
            c = self._local.conn = self.backend.connect(readonly=True)
        return c

"""Read connections for request handlers: one per thread (SQLite connections are not shared across threads,
and a PostgreSQL connection runs one statement at a time), opened lazily; WAL (SQLite) and MVCC (PostgreSQL) let
them read while the writer commits. A PostgreSQL connection found broken is opened again."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from .location import StoreLocation, sqlite_location
from .schema import connect


class RunStoreReader:
    def __init__(self, where: Path | StoreLocation) -> None:
        self.location = where if isinstance(where, StoreLocation) else sqlite_location(where)
        self.path = self.location.display
        self._local = threading.local()

    def conn(self) -> Any:
        c = getattr(self._local, "conn", None)
        if c is None or getattr(c, "closed", False):
            c = self._local.conn = connect(self.location, readonly=True)
        return c

"""Read connections for request handlers: one per thread (SQLite connections are not shared across
threads), opened lazily; WAL lets them read while the writer commits."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from .schema import connect


class RunStoreReader:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()

    def conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None:
            c = self._local.conn = connect(self.path, readonly=True)
        return c

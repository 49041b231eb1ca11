"""Open a profiler's SQLite export read-only and list its tables (nsys and Ascend exports, detection)."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def open_readonly(path: Path) -> tuple[sqlite3.Connection, set[str]]:
    """Raises sqlite3.DatabaseError for a file that is not a readable SQLite database."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError:
        conn.close()
        raise
    return conn, tables

"""Open a profiler's SQLite export read-only and list its tables (nsys and Ascend exports, detection)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any


def open_readonly(path: Path) -> tuple[sqlite3.Connection, set[str]]:
    """Raises sqlite3.DatabaseError for a file that is not a readable SQLite database."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError:
        conn.close()
        raise
    return conn, tables


def open_export(path: Path, report: Any, table: str, missing_hint: str) -> tuple[sqlite3.Connection, set[str]] | None:
    """open_readonly, reporting an unreadable file or a missing `table` on `report` (None then)."""
    try:
        conn, tables = open_readonly(path)
    except sqlite3.DatabaseError as exc:
        report.error(path, f"not a readable SQLite file ({exc})")
        return None
    if table not in tables:
        conn.close()
        report.error(path, f"no {table} table: {missing_hint}")
        return None
    return conn, tables

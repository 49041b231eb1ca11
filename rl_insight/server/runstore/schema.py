"""The run store's SQLite file: schema, opening, and refusing files that are not ours or are damaged.

A foreign or corrupt file is never modified or replaced: opening raises StoreError naming the
file and what to do, so nothing already stored is lost.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ...errors import StoreError

APPLICATION_ID = 0x524C4953  # "RLIS": marks the file as an rl-insight run store
SCHEMA_VERSION = 1

DDL = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    project TEXT NOT NULL,
    experiment_name TEXT NOT NULL,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    last_step REAL,
    finished_at REAL,
    UNIQUE (project, experiment_name)
);
CREATE TABLE IF NOT EXISTS series (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    labels TEXT NOT NULL,
    UNIQUE (run_id, name, kind, labels)
);
CREATE TABLE IF NOT EXISTS samples (
    series_id INTEGER NOT NULL,
    step REAL,
    ts REAL NOT NULL,
    value REAL
);
CREATE INDEX IF NOT EXISTS samples_by_step ON samples (series_id, step);
CREATE INDEX IF NOT EXISTS samples_by_ts ON samples (series_id, ts);
CREATE TABLE IF NOT EXISTS spans (
    run_id INTEGER NOT NULL,
    id TEXT NOT NULL,
    trace_id TEXT,
    parent_id TEXT,
    name TEXT NOT NULL,
    lane TEXT NOT NULL,
    kind TEXT NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER,
    attributes TEXT NOT NULL,
    PRIMARY KEY (run_id, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS spans_by_lane ON spans (run_id, lane, start_ns);
CREATE INDEX IF NOT EXISTS spans_by_start ON spans (run_id, start_ns);
CREATE INDEX IF NOT EXISTS spans_open ON spans (run_id) WHERE end_ns IS NULL;
"""


def connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open (creating if needed) the store; raise StoreError for foreign, newer or damaged files."""
    path.parent.mkdir(parents=True, exist_ok=True)
    existed = path.exists() and path.stat().st_size > 0
    try:
        uri = f"file:{path}?mode=ro" if readonly else f"file:{path}"
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None, timeout=30)
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"run store {path} is not a readable SQLite database ({exc})",
                         hint=f"move it aside (e.g. `mv {path} {path}.bad`) and start again; nothing was changed") from None
    if existed and app_id != APPLICATION_ID:
        conn.close()
        what = f"application_id {app_id:#x}" if app_id else f"tables {sorted(tables)[:5]}"
        raise StoreError(f"{path} is not an rl-insight run store ({what})",
                         hint="point --data-dir elsewhere or move the file aside; it was not modified")
    if version > SCHEMA_VERSION:
        conn.close()
        raise StoreError(f"run store {path} has schema version {version}; this rl-insight understands {SCHEMA_VERSION}",
                         hint="upgrade rl-insight, or use another data directory")
    if existed and not readonly:
        problems = conn.execute("PRAGMA quick_check").fetchall()
        if problems != [("ok",)]:
            conn.close()
            raise StoreError(f"run store {path} is damaged: {problems[0][0]}",
                             hint=f"move it aside (`mv {path} {path}.bad`) and start again; try `sqlite3 {path} .recover`")
    if not readonly:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process crashes, fast
        conn.execute("PRAGMA foreign_keys=ON")
        conn.executescript(DDL)
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    conn.execute("PRAGMA temp_store=MEMORY")
    conn.execute("PRAGMA cache_size=-65536")  # 64 MiB page cache
    return conn

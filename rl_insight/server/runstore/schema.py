"""The run store's schema (one DDL, in SQLite's dialect; postgres.py derives PostgreSQL's from it), opening a store
of either kind, and refusing files that are not ours or are damaged.

A foreign or corrupt file is never modified or replaced: opening raises StoreError naming the
file and what to do, so nothing already stored is lost.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from ...errors import StoreError, StoreUnavailableError
from ...fsutil import private_dir
from . import series_parts, series_totals, span_lod
from .location import StoreLocation

APPLICATION_ID = 0x524C4953  # "RLIS": marks the file as an rl-insight run store
SCHEMA_VERSION = 11
# 2: runs.config/tags (init(config=...)), runs.max_span_ns, step_stats, covering timeline index; 3: trajectories;
# 4: a sample is unique per (series, time), so a resend is stored once; 5: runs.end_state (how a run ended: a clean
# finish, or lost: the process logging its steps stopped reporting); 6: fleet_clients (several ingest servers on one
# store: which server each client process reports to now, server/fleet/registry.py); 7: fleet_records (what the
# servers of a fleet share besides runs: profile requests, stack snapshots, server/fleet/records.py) and
# fleet_clients.process (each client process as its server describes it: whom another server's snapshot asks);
# 8: span_lod (the timeline's level-of-detail summary, runstore/span_lod.py), older spans' buckets marked to build;
# 9: series.n_samples and series.last_step (kept by the writer, read by the metrics list: runstore/series_totals.py);
# 10: series_parts and series.total (a counter's value per sending process, summed: runstore/series_parts.py);
# 11: series.logged_name (the name as the job logged it, `actor/entropy`, where it differs from the stored one)

FLEET_DDL = """
CREATE TABLE IF NOT EXISTS fleet_clients (
    client_id TEXT PRIMARY KEY,
    server TEXT NOT NULL,
    project TEXT,
    experiment_name TEXT,
    last_seen REAL NOT NULL,
    process TEXT
);
CREATE INDEX IF NOT EXISTS fleet_clients_by_run ON fleet_clients (project, experiment_name, last_seen);
"""

# a record (part '') and its parts ('process:HOST:PID', 'file:NAME'), each a JSON body; a record's version moves on
# every change of it (compare-and-set), a part's changed_at (unix seconds) tells the other servers what to read again
RECORDS_DDL = """
CREATE TABLE IF NOT EXISTS fleet_records (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    part TEXT NOT NULL,
    project TEXT,
    experiment_name TEXT,
    body TEXT NOT NULL,
    version INTEGER NOT NULL,
    changed_at REAL NOT NULL,
    PRIMARY KEY (kind, id, part)
);
CREATE INDEX IF NOT EXISTS fleet_records_changed ON fleet_records (kind, changed_at);
"""
# what version 7 adds to a version-6 store (on PostgreSQL, runstore/postgres.py MIGRATIONS)
FLEET_V7 = RECORDS_DDL + "ALTER TABLE fleet_clients ADD COLUMN IF NOT EXISTS process TEXT;\n"

DDL = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    project TEXT NOT NULL,
    experiment_name TEXT NOT NULL,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    last_step REAL,
    finished_at REAL,
    config TEXT,
    tags TEXT,
    max_span_ns INTEGER,
    end_state TEXT,
    UNIQUE (project, experiment_name)
);
CREATE TABLE IF NOT EXISTS series (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    labels TEXT NOT NULL,
    n_samples INTEGER NOT NULL DEFAULT 0,
    last_step REAL,
    total REAL,
    logged_name TEXT,
    UNIQUE (run_id, name, kind, labels)
);
CREATE TABLE IF NOT EXISTS samples (
    series_id INTEGER NOT NULL,
    step REAL,
    ts REAL NOT NULL,
    value REAL
);
CREATE INDEX IF NOT EXISTS samples_by_step ON samples (series_id, step);
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
CREATE TABLE IF NOT EXISTS step_stats (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    lane TEXT NOT NULL,
    name TEXT NOT NULL,
    value REAL NOT NULL,
    PRIMARY KEY (run_id, step, lane, name)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS step_stats_by_time ON step_stats (run_id, start_ns);
CREATE TABLE IF NOT EXISTS step_blocks (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    first_step INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    lane TEXT NOT NULL,
    name TEXT NOT NULL,
    total REAL NOT NULL,
    mx REAL NOT NULL,
    PRIMARY KEY (run_id, first_step, lane, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS step_summaries (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    first_step INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    PRIMARY KEY (run_id, kind, first_step)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS trajectories (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    step INTEGER,
    info_step INTEGER,
    sample TEXT,
    rollout_n INTEGER,
    validate INTEGER,
    source TEXT,
    status TEXT,
    reward REAL,
    reported_turns INTEGER,
    info_start_ns INTEGER,
    info_end_ns INTEGER,
    start_ns INTEGER,
    end_ns INTEGER,
    duration_s REAL,
    turns INTEGER NOT NULL DEFAULT 0,
    generates INTEGER NOT NULL DEFAULT 0,
    tool_calls INTEGER NOT NULL DEFAULT 0,
    tool_errors INTEGER NOT NULL DEFAULT 0,
    tokens_in INTEGER,
    tokens_out INTEGER,
    generate_s REAL,
    tool_s REAL,
    replica TEXT,
    tools TEXT,
    UNIQUE (run_id, key)
);
CREATE INDEX IF NOT EXISTS trajectories_by_step ON trajectories (run_id, step, duration_s);
CREATE TABLE IF NOT EXISTS turns (
    traj INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    span_id TEXT NOT NULL,
    end_ns INTEGER NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    step INTEGER,
    replica TEXT,
    tokens_in INTEGER,
    tokens_out INTEGER,
    error TEXT,
    request_id TEXT,
    detail TEXT,
    PRIMARY KEY (traj, start_ns, span_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS turns_by_request ON turns (request_id) WHERE request_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS llm_requests (
    run_id INTEGER NOT NULL,
    request_id TEXT NOT NULL,
    parent_id TEXT,
    trace_id TEXT,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    replica TEXT,
    tokens_in INTEGER,
    tokens_out INTEGER,
    queue_s REAL,
    ttft_s REAL,
    prefill_s REAL,
    decode_s REAL,
    PRIMARY KEY (run_id, request_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS llm_requests_by_parent ON llm_requests (run_id, parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS spans_by_lane_cover ON spans (run_id, lane, start_ns, end_ns, kind, name);
CREATE INDEX IF NOT EXISTS spans_by_start ON spans (run_id, start_ns);
CREATE INDEX IF NOT EXISTS spans_open ON spans (run_id) WHERE end_ns IS NULL;
""" + FLEET_DDL + RECORDS_DDL + span_lod.DDL + series_parts.DDL + ";\n"
# a sample is stored once per series and time (version 4; on SQLite added by _migrate after removing the copies an
# older file may hold, on PostgreSQL with the tables: postgres.py)
SAMPLES_ONCE = "CREATE UNIQUE INDEX IF NOT EXISTS samples_once ON samples (series_id, ts)"
# what version 8 adds (both engines): the summary's tables, and every bucket of the spans already stored to build
LOD_V8 = span_lod.DDL + span_lod.BACKFILL + ";\n"


QUICK_CHECK_MAX_BYTES = 256 * 2**20  # larger stores are checked in the background, after the server is ready


def _prepare_file(path: Path) -> None:
    """The store file 0600 (SQLite gives -wal/-shm the file's mode), and its directory 0700 when it is made here. A
    directory that exists is left as it is: a store named in /tmp or in a project's folder must not take that folder
    from its other users (the file's own mode keeps the data private)."""
    try:
        private_dir(path.parent)
        if not path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        else:
            for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
                if p.exists():
                    os.chmod(p, 0o600)
    except PermissionError as exc:
        raise StoreError(
            f"cannot create or open the run store {path}: permission denied ({exc.filename or path.parent})",
            hint="use a --data-dir you can write, or fix the directory's owner and permissions",
        ) from None
    except OSError as exc:
        raise StoreError(
            f"cannot create the run store {path}: {exc.strerror or exc}",
            hint="check that the data directory is on a writable, mounted file system with free space",
        ) from None


def quick_check(conn: sqlite3.Connection, path: Path) -> str:
    """'ok' or the first problem SQLite reports (never raises for a damaged file)."""
    try:
        problems = conn.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok" if problems == [("ok",)] else str(problems[0][0])


def _migrate(conn: sqlite3.Connection, version: int) -> None:
    """Bring a store written by an older rl-insight up to SCHEMA_VERSION, adding, never rewriting."""
    columns = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
    for col, kind in (("config", "TEXT"), ("tags", "TEXT"), ("max_span_ns", "INTEGER"),  # version 1 -> 2
                      ("end_state", "TEXT")):  # version 4 -> 5
        if col not in columns:
            conn.execute(f"ALTER TABLE runs ADD COLUMN {col} {kind}")
            if col == "max_span_ns":  # one scan, once: window queries are bounded by each run's longest span
                conn.execute("UPDATE runs SET max_span_ns = (SELECT max(end_ns - start_ns) FROM spans WHERE run_id = "
                             "runs.id)")
    if "process" not in {r[1] for r in conn.execute("PRAGMA table_info(fleet_clients)")}:  # version 6 -> 7
        conn.execute("ALTER TABLE fleet_clients ADD COLUMN process TEXT")
    if version < 8:  # (the summary's tables come with the DDL)
        conn.execute(span_lod.BACKFILL)
    # version 1 -> 2: the timeline scan reads a covering index (no table lookups) instead of (run_id, lane, start_ns)
    conn.execute("DROP INDEX IF EXISTS spans_by_lane")
    # version 3 -> 4: (series, time) unique, so a resent sample is stored once; copies stored before are removed first
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'samples_once'").fetchone() is None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "DELETE FROM samples WHERE rowid IN (SELECT s.rowid FROM samples s WHERE EXISTS (SELECT 1 FROM samples t "
            "WHERE t.series_id = s.series_id AND t.ts = s.ts AND t.rowid < s.rowid))"
        )
        conn.execute(SAMPLES_ONCE)
        conn.execute("DROP INDEX IF EXISTS samples_by_ts")
        conn.execute("COMMIT")
    # version 8 -> 9 (after the copies are gone): each series' totals, kept by the writer from now on
    if "n_samples" not in {r[1] for r in conn.execute("PRAGMA table_info(series)")}:
        conn.execute("BEGIN IMMEDIATE")  # (the columns and their totals together: never columns of zeros)
        for column, kind in series_totals.COLUMNS:
            conn.execute(f"ALTER TABLE series ADD COLUMN {column} {kind}")
        conn.execute(series_totals.RECOUNT)
        conn.execute("COMMIT")
    # version 9 -> 10: counters summed from each process's own value (the table comes with the DDL)
    if "total" not in {r[1] for r in conn.execute("PRAGMA table_info(series)")}:
        conn.execute("ALTER TABLE series ADD COLUMN total REAL")
    # version 10 -> 11: the name as logged (series stored before keep NULL: shown as stored)
    if "logged_name" not in {r[1] for r in conn.execute("PRAGMA table_info(series)")}:
        conn.execute("ALTER TABLE series ADD COLUMN logged_name TEXT")


# PostgreSQL aborted the transaction for a conflict with another's (deadlock detected, serialization failure): the
# other went through, so the same transaction again will too
TRANSIENT_CONFLICTS = ("40P01", "40001")


def is_transient_conflict(exc: BaseException) -> bool:
    return getattr(exc, "sqlstate", None) in TRANSIENT_CONFLICTS


def is_storage_failure(exc: BaseException) -> bool:
    """Failures of the file or server itself (disk full, I/O, locked, connection lost): retrying item by item would
    not help."""
    if isinstance(exc, StoreUnavailableError):  # (a PostgreSQL store that cannot be reached now)
        return True
    if type(exc).__module__.startswith("psycopg"):
        from .postgres import is_storage_failure as postgres_failure

        return postgres_failure(exc)
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    msg = str(exc).lower()
    return any(w in msg for w in ("full", "disk i/o", "locked", "readonly", "read-only", "unable to open", "malformed"))


def connect(where: Path | StoreLocation, *, readonly: bool = False) -> Any:
    """Open (creating if needed) the store, a SQLite file or a PostgreSQL database (runstore/postgres.py); raise
    StoreError for foreign, newer or damaged stores, or a directory that cannot be written."""
    if isinstance(where, StoreLocation):
        if where.kind == "postgresql":
            from .postgres import connect_postgres

            return connect_postgres(where, readonly=readonly)
        assert where.path is not None
        where = where.path
    return connect_sqlite(where, readonly=readonly)


def connect_sqlite(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open (creating if needed) the store's file; raise StoreError for foreign, newer or damaged files, or a
    directory that cannot be written. Stores above QUICK_CHECK_MAX_BYTES are not checked here (that
    would take minutes near the size limit); the writer checks them in the background."""
    existed = path.exists() and path.stat().st_size > 0
    if not readonly:
        _prepare_file(path)
    damaged_hint = (
        f"move it aside (`mv {path} {path}.bad`) and start again; try `sqlite3 {path} .recover`; nothing was changed"
    )
    try:
        uri = f"file:{path}?mode=ro" if readonly else f"file:{path}"
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None, timeout=30)
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"run store {path} is not a readable SQLite database ({exc})", hint=damaged_hint) from None
    if existed and app_id != APPLICATION_ID:
        conn.close()
        what = f"application_id {app_id:#x}" if app_id else f"tables {sorted(tables)[:5]}"
        raise StoreError(f"{path} is not an rl-insight run store ({what})",
                         hint="point --data-dir elsewhere or move the file aside; it was not modified")
    if version > SCHEMA_VERSION:
        conn.close()
        raise StoreError(f"run store {path} has schema version {version}; this rl-insight understands {SCHEMA_VERSION}",
                         hint="upgrade rl-insight, or use another data directory")
    if existed and not readonly and path.stat().st_size <= QUICK_CHECK_MAX_BYTES:
        result = quick_check(conn, path)
        if result != "ok":
            conn.close()
            raise StoreError(f"run store {path} is damaged: {result}", hint=damaged_hint)
    try:
        if not readonly:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process crashes, fast
            conn.execute("PRAGMA foreign_keys=ON")
            conn.executescript(DDL)
            _migrate(conn, version)
            conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            _prepare_file(path)  # the -wal/-shm files now exist
        conn.execute("PRAGMA temp_store=MEMORY")
        conn.execute("PRAGMA cache_size=-65536")  # 64 MiB page cache
    except sqlite3.OperationalError as exc:
        conn.close()
        if "readonly" in str(exc) or "read-only" in str(exc) or "unable to open" in str(exc):
            raise StoreError(f"run store {path} cannot be written ({exc})",
                             hint="use a --data-dir you can write, or fix the file's owner and permissions") from None
        raise StoreError(f"run store {path} cannot be prepared ({exc})", hint=damaged_hint) from None
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StoreError(f"run store {path} is damaged ({exc})", hint=damaged_hint) from None
    return conn

"""The embedded run store: one SQLite file (WAL) under the data directory.

Opening refuses what is not ours or is damaged: a file with another application's id or tables, a newer schema
version, or one SQLite's quick check finds damaged, raises StoreError naming the file and what to do; nothing in it is
modified or replaced. Stores above QUICK_CHECK_MAX_BYTES are checked in the background instead (minutes near the
size limit), by the writer (`integrity_deferred`, `check_integrity`).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any, Sequence

from ....errors import StoreError, StoreUnavailableError
from ....fsutil import private_dir
from . import migrations, sqlite_rows
from .checkpoints import Checkpointer, take_over
from .dialect import SQLITE, Dialect, StoreConnection
from .location import StoreLocation
from .schema import APPLICATION_ID, DDL, SAMPLES_ONCE, SCHEMA_VERSION, indexes, tables

QUICK_CHECK_MAX_BYTES = 256 * 2**20  # larger stores are checked in the background, after the server is ready
_STORAGE_WORDS = ("full", "disk i/o", "locked", "readonly", "read-only", "unable to open", "malformed")


class SqliteConnection(sqlite3.Connection):
    """A sqlite3 connection that carries its dialect, as every store connection does."""

    dialect: Dialect = SQLITE

    def insert_rows(self, sql: str, rows: Sequence[Sequence[Any]], /) -> int:
        return sqlite_rows.insert_rows(self, sql, rows)

    def insert_rows_written(self, sql: str, rows: Sequence[Sequence[Any]], /) -> list[bool]:
        """(a row at a time: in process, a statement is no round trip)"""
        return [self.execute(sql + " RETURNING 1", row).fetchone() is not None for row in rows]


def _refuse_foreign_newer_or_damaged(conn: SqliteConnection, path: Path, check: bool, app_id: int | None,
                                     version: int, names: set[str], damaged_hint: str) -> None:
    """StoreError when an existing file (`app_id` read from it) is not ours, is newer than this release, or (`check`:
    a small one opened for writing) fails SQLite's quick check."""
    if app_id is not None and app_id != APPLICATION_ID:
        what = f"application_id {app_id:#x}" if app_id else f"tables {sorted(names)[:5]}"
        raise StoreError(f"{path} is not an rl-insight run store ({what})",
                         hint="point --data-dir elsewhere or move the file aside; it was not modified")
    if version > SCHEMA_VERSION:
        raise StoreError(f"run store {path} has schema version {version}; this rl-insight understands "
                         f"{SCHEMA_VERSION}", hint="upgrade rl-insight, or use another data directory")
    if check and path.stat().st_size <= QUICK_CHECK_MAX_BYTES:
        result = quick_check(conn)
        if result != "ok":
            raise StoreError(f"run store {path} is damaged: {result}", hint=damaged_hint)


class SqliteBackend:
    """The run store in a SQLite file (`location.path`)."""

    shared = False  # one server's: a fleet needs PostgreSQL
    dialect: Dialect = SQLITE

    def __init__(self, location: StoreLocation) -> None:
        assert location.path is not None
        self.location = location
        self.path: Path = location.path

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.Error,)

    def check_available(self) -> None:
        """SQLite comes with Python: always."""

    def connect(self, *, readonly: bool = False) -> SqliteConnection:
        """Open (creating and upgrading unless `readonly`) the file; StoreError for a foreign, newer or damaged one,
        or a directory that cannot be written."""
        path = self.path
        existed = path.exists() and path.stat().st_size > 0
        if not readonly:
            _prepare_file(path)
        damaged_hint = (f"move it aside (`mv {path} {path}.bad`) and start again; try `sqlite3 {path} .recover`; "
                        "nothing was changed")
        try:
            uri = f"file:{path}?mode=ro" if readonly else f"file:{path}"
            conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None, timeout=30,
                                   factory=SqliteConnection)
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"run store {path} is not a readable SQLite database ({exc})", hint=damaged_hint) from None
        try:
            _refuse_foreign_newer_or_damaged(conn, path, existed and not readonly, app_id if existed else None,
                                             version, names, damaged_hint)
        except StoreError:
            conn.close()
            raise
        try:
            if not readonly:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process crashes, fast
                conn.execute("PRAGMA foreign_keys=ON")
                if version < SCHEMA_VERSION:
                    _upgrade(conn, version)
                _prepare_file(path)  # the -wal/-shm files now exist
            conn.execute("PRAGMA temp_store=MEMORY")
            conn.execute("PRAGMA cache_size=-65536")  # 64 MiB page cache
        except sqlite3.OperationalError as exc:
            conn.close()
            if "readonly" in str(exc) or "read-only" in str(exc) or "unable to open" in str(exc):
                raise StoreError(f"run store {path} cannot be written ({exc})",
                                 hint="use a --data-dir you can write, or fix the file's owner and permissions"
                                 ) from None
            raise StoreError(f"run store {path} cannot be prepared ({exc})", hint=damaged_hint) from None
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StoreError(f"run store {path} is damaged ({exc})", hint=damaged_hint) from None
        return conn

    # ------------------------------------------------------------------ what the writer asks
    def checkpointer(self, conn: StoreConnection) -> Checkpointer | None:
        """Take the writer's WAL checkpoints off its commits (checkpoints.py)."""
        assert isinstance(conn, sqlite3.Connection)
        take_over(conn)
        return Checkpointer(self.path)

    def integrity_deferred(self) -> bool:
        """Whether the file was too large to check on opening (the writer checks it in the background)."""
        return self.path.exists() and self.path.stat().st_size > QUICK_CHECK_MAX_BYTES

    def check_integrity(self) -> str:
        """'ok' or the first problem SQLite's quick check reports."""
        conn = self.connect(readonly=True)
        try:
            return quick_check(conn)
        finally:
            conn.close()

    def used_bytes(self, conn: StoreConnection) -> int:
        """Pages in use (the file does not shrink without VACUUM: its free pages are reused first)."""
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        count = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        return int((count - free) * page)

    def run_bytes(self, conn: StoreConnection, run_id: int) -> int | None:
        """None: the file's pages in use are measured again after a deletion, cheaply."""
        return None

    def is_storage_failure(self, exc: BaseException) -> bool:
        """The file itself failed (disk full, I/O, locked, read-only, damaged): item by item would not help."""
        if isinstance(exc, StoreUnavailableError):
            return True
        return isinstance(exc, sqlite3.OperationalError) and any(w in str(exc).lower() for w in _STORAGE_WORDS)

    def is_transient(self, exc: BaseException) -> bool:
        """One writer per file: no transaction ever loses to another's."""
        return False

    def has_table(self, conn: StoreConnection, table: str) -> bool:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
        return found is not None

    def session_lock(self, key: int) -> Any:
        raise StoreError(f"{self.location.display} is a SQLite file, one server's; a fleet shares a PostgreSQL store")


def quick_check(conn: sqlite3.Connection) -> str:
    """'ok' or the first problem SQLite reports (never raises for a damaged file)."""
    try:
        problems = conn.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok" if problems == [("ok",)] else str(problems[0][0])


def _upgrade(conn: sqlite3.Connection, version: int) -> None:
    """Create (version 0) or upgrade the schema to SCHEMA_VERSION in one transaction (migrations.py)."""

    def has_column(table: str, column: str) -> bool:
        return column in {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}

    conn.execute("BEGIN IMMEDIATE")
    try:
        for stmt in tables():
            conn.execute(stmt)
        if version == 0:
            conn.execute(SAMPLES_ONCE)
        for step in migrations.pending(version, "sqlite") if version else ():
            migrations.apply(step, "sqlite", conn.execute, has_column)
        for stmt in indexes(DDL):
            conn.execute(stmt)
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


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

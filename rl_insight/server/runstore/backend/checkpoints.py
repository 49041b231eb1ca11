"""The SQLite store's WAL checkpoints, off the commit path.

Why: SQLite's automatic checkpoint runs inside the COMMIT that takes the WAL past 1,000 pages: it copies the WAL's
pages into the database file and fdatasyncs both files on the writer's thread, while every answer waits for that
commit. Under 1,000 clients at a batch a second that was about ten checkpoints a second, and a sync that took
100-300 ms (the disk busy with another process's reads, an insight round's) held every waiting answer that long:
the p99 of the whole load (bench/RESULTS.md, issue 24).

How: the writer's connection turns the automatic checkpoint off (`take_over`). A `Checkpointer` thread with a
connection of its own runs a PASSIVE checkpoint every EVERY_S: it copies and syncs without the write lock, so commits
go on meanwhile. A PASSIVE checkpoint alone never lets the WAL start over while commits keep adding to it (SQLite
restarts the WAL at the start of a write only when every page in it was copied), so the writer, between two of its
transactions, runs `finish`: once the checkpointer has caught up with a WAL over RESTART_BYTES, the writer copies the
few pages committed since (milliseconds), and its next transaction starts the WAL from the beginning
(`journal_size_limit` trims the file).

Invariants: durability is SQLite's own (WAL with synchronous=NORMAL: a commit is in the WAL, which a checkpoint syncs
before it copies from it; both connections sync). Readers never wait for a checkpoint. A failed checkpoint is
counted and logged (at most once a minute) and the next one tries again; PostgreSQL has no such thing
(its backend has no checkpointer).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path

from typing_extensions import TypedDict

from .dialect import StoreConnection

log = logging.getLogger("rl_insight.server.runstore")

EVERY_S = 0.5  # between two of the checkpointer's passes
RESTART_BYTES = 16 * 1024 * 1024  # a WAL holding more than this is finished by the writer, so it starts over
CAUGHT_UP_FRAMES = 4096  # the checkpointer left at most this many pages to copy: finishing is cheap
WAL_FILE_LIMIT = 256 * 1024 * 1024  # the WAL file is trimmed to this when it starts over (journal_size_limit): well
# above what it holds between restarts, since a file trimmed and grown again each time syncs its size too
LOG_EVERY_S = 60.0


def take_over(conn: sqlite3.Connection) -> None:
    """Turn the writer's automatic checkpoints off (a `Checkpointer` runs them) and bound the WAL file's size."""
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute(f"PRAGMA journal_size_limit={WAL_FILE_LIMIT}")



class CheckpointHealth(TypedDict):
    """/healthz's word on the SQLite WAL checkpoints: passes, the writer's finishes (restarts), failures, the WAL's
    pages and how many the last pass copied, and the last error."""

    passes: int
    restarts: int
    failures: int
    wal_pages: int
    wal_pages_copied: int
    last_error: str | None

class Checkpointer:
    def __init__(self, path: Path, every_s: float = EVERY_S, restart_bytes: int = RESTART_BYTES) -> None:
        self._conn = sqlite3.connect(f"file:{path}", uri=True, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA synchronous=NORMAL")  # (a checkpoint syncs by its own connection's setting)
        page = int(self._conn.execute("PRAGMA page_size").fetchone()[0])
        self._restart_frames = max(1, restart_bytes // page)
        self._every = every_s
        self._lock = threading.Lock()  # the checkpointer's connection: its thread's, or close()'s
        self._latest: tuple[int, int] = (0, 0)  # (pages in the WAL, pages copied) after the checkpointer's last pass
        self._fresh = False  # a pass completed since the writer last finished
        self.passes = self.finished = self.failures = 0
        self.last_error: str | None = None
        self._logged_at = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rl-insight-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            with self._lock:
                if self._stop.is_set():
                    return
                result = self._checkpoint(self._conn)
            if result is not None:
                self.passes += 1
                self._latest, self._fresh = result, True

    def finish(self, conn: StoreConnection) -> bool:
        """On the writer's thread, between its transactions: copy what the checkpointer left when it has just caught
        up with a WAL over RESTART_BYTES, so that the writer's next transaction starts the WAL over. True when it
        did."""
        frames, copied = self._latest
        if not self._fresh or frames < self._restart_frames or frames - copied > CAUGHT_UP_FRAMES:
            return False
        self._fresh = False
        if self._checkpoint(conn) is None:
            return False
        self.finished += 1
        return True

    def _checkpoint(self, conn: sqlite3.Connection | StoreConnection) -> tuple[int, int] | None:
        """One PASSIVE checkpoint: (pages in the WAL, pages copied), or None when it failed (counted, logged)."""
        try:
            _busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            return int(frames), int(copied)
        except sqlite3.Error as exc:
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            now = time.monotonic()
            if now - self._logged_at > LOG_EVERY_S:
                self._logged_at = now
                log.warning("run store checkpoint failed (%s); the next one tries again", self.last_error)
            return None

    def health(self) -> CheckpointHealth:
        """What /healthz says of the checkpoints: passes, the writer's finishes, failures and the last error."""
        frames, copied = self._latest
        return {"passes": self.passes, "restarts": self.finished, "failures": self.failures,
                "wal_pages": frames, "wal_pages_copied": copied, "last_error": self.last_error}

    def close(self) -> None:
        """Stop the thread and close its connection (before the writer's own: the last connection to close
        checkpoints the rest and removes the WAL)."""
        self._stop.set()
        with self._lock:
            self._conn.close()
        self._thread.join(5)

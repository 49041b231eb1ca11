"""WAL checkpoints off the commit path (server/runstore/backend/checkpoints.py): the writer's connection never
checkpoints inside a commit, the WAL still starts over (its file stays bounded), nothing committed is lost, failures are
counted, and PostgreSQL has none."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from rl_insight.server.runstore.backend.checkpoints import Checkpointer, take_over
from rl_insight.server.runstore.backend.location import StoreLocation
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.writer import RunStoreWriter

ROW_BYTES = 1024
ROWS_PER_COMMIT = 40  # ~10 pages a commit


def _wal_store(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, blob BLOB)")
    return conn


def _commit_rows(conn: sqlite3.Connection, first: int) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("INSERT INTO t VALUES (?, randomblob(?))",
                     [(first + i, ROW_BYTES) for i in range(ROWS_PER_COMMIT)])
    conn.execute("COMMIT")


def test_the_writer_never_checkpoints_in_a_commit_and_the_wal_still_starts_over(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    conn = _wal_store(path)
    take_over(conn)
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    restart_bytes = 256 * 1024
    ck = Checkpointer(path, every_s=0.005, restart_bytes=restart_bytes)
    try:
        commits = 300  # ~12 MB through the WAL in all
        for k in range(commits):
            _commit_rows(conn, k * ROWS_PER_COMMIT)
            ck.finish(conn)  # between two transactions, as the writer's upkeep does
            time.sleep(0.002)
        health = ck.health()
        assert health["passes"] > 0 and health["failures"] == 0 and health["last_error"] is None
        assert health["restarts"] > 0, health  # the writer finished what the checkpointer left: the WAL started over
        written = commits * ROWS_PER_COMMIT * ROW_BYTES
        wal = Path(f"{path}-wal").stat().st_size
        assert wal < written / 4, (wal, written)  # the file holds what came since a restart, not everything
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == commits * ROWS_PER_COMMIT
    finally:
        ck.close()
        conn.close()
    # every commit is in the file once the last connection closed (it checkpoints the rest)
    again = sqlite3.connect(path)
    assert again.execute("SELECT count(*) FROM t").fetchone()[0] == commits * ROWS_PER_COMMIT
    assert again.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    again.close()


def test_without_the_checkpointer_passing_the_writer_does_not_checkpoint(tmp_path: Path) -> None:
    # `finish` runs only just after a pass of the checkpointer's: it never does a whole checkpoint's copying itself
    path = tmp_path / "s.sqlite"
    conn = _wal_store(path)
    take_over(conn)
    ck = Checkpointer(path, every_s=3600, restart_bytes=4096)
    try:
        for k in range(20):
            _commit_rows(conn, k * ROWS_PER_COMMIT)
            assert ck.finish(conn) is False
        assert ck.health()["passes"] == 0 and ck.health()["restarts"] == 0
        frames = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
        assert frames >= 20 * 10  # nothing was copied out of the WAL meanwhile (this call copies now)
    finally:
        ck.close()
        conn.close()


def test_a_failed_checkpoint_is_counted_and_named(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    conn = _wal_store(path)
    ck = Checkpointer(path, every_s=3600)
    try:
        broken = sqlite3.connect(path, isolation_level=None)
        broken.close()
        assert ck._checkpoint(broken) is None  # a closed connection: sqlite3.ProgrammingError
        health = ck.health()
        assert health["failures"] == 1 and "closed" in health["last_error"]
    finally:
        ck.close()
        conn.close()


def test_a_run_store_writer_checkpoints_on_its_thread_and_says_so(store_at: StoreLocation) -> None:
    w = RunStoreWriter(store_at, flush_interval_s=0.01)
    try:
        for k in range(50):
            w.put_samples([SampleRow("p", "e", "m", "gauge", "{}", k, 1_700_000_000 + k, float(k))])
        assert w.flush(10)
        if store_at.kind == "postgresql":  # PostgreSQL checkpoints itself: nothing of ours, nothing to report
            assert w.checkpoints is None and w.checkpoint_health() is None
            return
        assert w.checkpoints is not None
        assert w._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        deadline = time.monotonic() + 10
        while (w.checkpoint_health() or {}).get("passes", 0) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        health = w.checkpoint_health()
        assert health is not None and health["passes"] > 0 and health["failures"] == 0
    finally:
        w.close()
    assert store_at.path is not None
    c = sqlite3.connect(store_at.path)
    assert c.execute("SELECT count(*) FROM samples").fetchone()[0] == 50
    c.close()

"""Retention of the run store, in SQL: runs not seen for the retention period go, then the oldest runs while the
file holds more than its size bound. The writer decides when (on its own thread, so deletions never contend
with writes) and forgets what it cached about the runs deleted."""

from __future__ import annotations

import sqlite3
from typing import Callable

from .dialect import is_postgres


def used_bytes(conn: sqlite3.Connection) -> int:
    """Bytes in use: pages minus free pages (the file does not shrink without VACUUM); on PostgreSQL, what the
    store's tables and indexes take."""
    if is_postgres(conn):
        from .postgres import used_bytes as postgres_bytes

        return postgres_bytes(conn)  # type: ignore[arg-type]
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    count = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    return int((count - free) * page)


def run_bytes(conn: sqlite3.Connection, run_id: int) -> int | None:
    """What deleting the run frees, where the size cannot simply be measured again (PostgreSQL); else None."""
    if is_postgres(conn):
        from .postgres import run_bytes as postgres_run_bytes

        return postgres_run_bytes(conn, run_id)  # type: ignore[arg-type]
    return None


def runs_not_seen_since(conn: sqlite3.Connection, cutoff: float) -> list[int]:
    return [r[0] for r in conn.execute("SELECT id FROM runs WHERE last_seen < ?", (cutoff,))]


def oldest_run(conn: sqlite3.Connection) -> int | None:
    row = conn.execute("SELECT id FROM runs ORDER BY last_seen LIMIT 1").fetchone()
    return None if row is None else int(row[0])


def delete_runs(conn: sqlite3.Connection, run_ids: list[int]) -> set[tuple[str, str]]:
    """Everything of these runs, in one transaction; the (project, experiment_name) of each run deleted."""
    marks = ",".join("?" * len(run_ids))
    keys = {(p, e) for p, e in conn.execute(f"SELECT project, experiment_name FROM runs WHERE id IN ({marks})",
                                            run_ids)}
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(f"DELETE FROM samples WHERE series_id IN (SELECT id FROM series WHERE run_id IN ({marks}))",
                     run_ids)
        conn.execute(f"DELETE FROM series_parts WHERE series_id IN (SELECT id FROM series WHERE run_id IN ({marks}))",
                     run_ids)
        conn.execute(f"DELETE FROM series WHERE run_id IN ({marks})", run_ids)
        for table in ("spans", "span_lod", "span_lod_dirty", "step_stats", "step_blocks", "step_summaries"):
            conn.execute(f"DELETE FROM {table} WHERE run_id IN ({marks})", run_ids)
        conn.execute(f"DELETE FROM turns WHERE traj IN (SELECT id FROM trajectories WHERE run_id IN ({marks}))",
                     run_ids)
        conn.execute(f"DELETE FROM trajectories WHERE run_id IN ({marks})", run_ids)
        conn.execute(f"DELETE FROM llm_requests WHERE run_id IN ({marks})", run_ids)
        conn.execute(f"DELETE FROM runs WHERE id IN ({marks})", run_ids)
        conn.execute("COMMIT")
    except BaseException:  # (the store went away mid-way: the writer's connection must not stay in a transaction)
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return keys


def prune(conn: sqlite3.Connection, cutoff: float, max_bytes: int, delete: Callable[[list[int]], object]) -> int:
    """Runs not seen since `cutoff`, then the oldest while the store holds more than `max_bytes`, through `delete`
    (the writer's: it forgets what it cached about them); how many runs went."""
    old = runs_not_seen_since(conn, cutoff)
    if old:
        delete(old)
    removed = len(old)
    used = used_bytes(conn)
    while used > max_bytes:
        oldest = oldest_run(conn)
        if oldest is None:
            break
        freed = run_bytes(conn, oldest)
        delete([oldest])
        removed += 1
        used = used_bytes(conn) if freed is None else used - freed
    return removed

"""Retention of the run store, in SQL: runs not seen for the retention period go, then the oldest runs while the
file holds more than its size bound. The writer decides when (on its own thread, so deletions never contend
with writes) and forgets what it cached about the runs deleted."""

from __future__ import annotations

from typing import Callable

from .backend import Backend, StoreConnection

# the defaults: the server's config, the stack settings, the CLI's flags and the writer read these (stated once)
DEFAULT_RETENTION_DAYS = 30.0
DEFAULT_STORE_MAX_GB = 20.0
DEFAULT_STORE_MAX_BYTES = int(DEFAULT_STORE_MAX_GB * 2**30)


def runs_not_seen_since(conn: StoreConnection, cutoff: float) -> list[int]:
    return [r[0] for r in conn.execute("SELECT id FROM runs WHERE last_seen < ?", (cutoff,))]


def oldest_run(conn: StoreConnection) -> int | None:
    row = conn.execute("SELECT id FROM runs ORDER BY last_seen LIMIT 1").fetchone()
    return None if row is None else int(row[0])


def delete_runs(conn: StoreConnection, run_ids: list[int]) -> set[tuple[str, str]]:
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
        for table in ("spans", "span_lod", "span_lod_dirty", "step_marks", "step_stats", "step_blocks",
                      "step_summaries"):
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


def prune(backend: Backend, conn: StoreConnection, cutoff: float, max_bytes: int,
          delete: Callable[[list[int]], object]) -> int:
    """Runs not seen since `cutoff`, then the oldest while the store holds more than `max_bytes`, through `delete`
    (the writer's: it forgets what it cached about them); how many runs went."""
    old = runs_not_seen_since(conn, cutoff)
    if old:
        delete(old)
    removed = len(old)
    used = backend.used_bytes(conn)
    while used > max_bytes:
        oldest = oldest_run(conn)
        if oldest is None:
            break
        freed = backend.run_bytes(conn, oldest)
        delete([oldest])
        removed += 1
        used = backend.used_bytes(conn) if freed is None else used - freed
    return removed

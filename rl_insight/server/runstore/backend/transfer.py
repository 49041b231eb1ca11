"""Moving a run store to PostgreSQL (`rl-insight server migrate --from FILE|URL --to postgresql://…`): every table,
row for row, ids kept (series, trajectories and turns refer to them), in chunks ordered by each table's key.
Each series' sample count and last step are counted again from the moved samples at the end.

Invariants: the source is only read. Each chunk and the place it reached (`migrate:<table>` in the destination's
`rl_insight_meta`) commit together, so an interrupted move resumes where it stopped and copies nothing twice
(inserts also skip rows already there). A destination that holds runs of its own (not from this source) is refused
before anything is written: the ids would collide. At the end each table's rows are counted on both sides; a
difference is an error naming the table. Then every table is analysed, so the planner knows the moved data at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from ....errors import ConflictError, StoreError
from . import Backend, open_backend
from .dialect import StoreConnection
from .location import StoreLocation
from .schema import SERIES_PARTS_RECOUNT, SERIES_TOTALS_RECOUNT, STEP_MARKS_BACKFILL

# (table, its key columns in order, its columns); parents before the rows that refer to them
TABLES: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
    ("runs", ("id",), ("id", "project", "experiment_name", "first_seen", "last_seen", "last_step", "finished_at",
                       "config", "tags", "max_span_ns", "end_state")),
    ("series", ("id",), ("id", "run_id", "name", "kind", "labels", "logged_name")),  # (logged_name: schema 11+)
    ("samples", ("series_id", "ts"), ("series_id", "step", "ts", "value")),
    ("series_parts", ("series_id", "client"), ("series_id", "client", "value", "ts")),  # (a source of schema 10+)
    ("spans", ("run_id", "id"), ("run_id", "id", "trace_id", "parent_id", "name", "lane", "kind", "start_ns", "end_ns",
                                 "attributes")),
    ("step_marks", ("run_id", "name", "step"), ("run_id", "name", "step", "ts")),  # (a source of schema 12+)
    ("step_stats", ("run_id", "step", "lane", "name"), ("run_id", "step", "start_ns", "end_ns", "lane", "name",
                                                        "value")),
    ("step_blocks", ("run_id", "first_step", "lane", "name"), ("run_id", "first_step", "start_ns", "end_ns", "lane",
                                                               "name", "total", "mx")),
    ("step_summaries", ("run_id", "kind", "first_step"), ("run_id", "kind", "first_step", "start_ns", "end_ns")),
    ("trajectories", ("id",), ("id", "run_id", "key", "step", "info_step", "sample", "rollout_n", "validate", "source",
                               "status", "reward", "reported_turns", "info_start_ns", "info_end_ns", "start_ns",
                               "end_ns", "duration_s", "turns", "generates", "tool_calls", "tool_errors", "tokens_in",
                               "tokens_out", "generate_s", "tool_s", "replica", "tools")),
    ("turns", ("traj", "start_ns", "span_id"), ("traj", "start_ns", "span_id", "end_ns", "kind", "name", "step",
                                                "replica", "tokens_in", "tokens_out", "error", "request_id", "detail")),
    ("span_lod", ("run_id", "lane", "level", "bucket_ns", "seq"),
     ("run_id", "lane", "level", "bucket_ns", "seq", "depth", "name", "start_ns", "end_ns", "merged", "longest_ns",
      "span_id")),
    ("span_lod_dirty", ("run_id", "lane", "level", "bucket_ns"),
     ("run_id", "lane", "level", "bucket_ns", "generation")),
    ("llm_requests", ("run_id", "request_id"), ("run_id", "request_id", "parent_id", "trace_id", "start_ns", "end_ns",
                                                "replica", "tokens_in", "tokens_out", "queue_s", "ttft_s", "prefill_s",
                                                "decode_s")),
]
IDENTITY_TABLES = ("runs", "series", "trajectories")  # their id sequences continue after the copied ids


@dataclass
class MigrationReport:
    copied: dict[str, int] = field(default_factory=dict)  # rows copied by this call (a resumed move: the rest)
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # table -> (source rows, destination rows)
    resumed: bool = False


def _meta(dst: Any, key: str) -> str | None:
    row = dst.execute("SELECT value FROM rl_insight_meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def _set_meta(dst: Any, key: str, value: str) -> None:
    dst.execute("INSERT INTO rl_insight_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
                "value = excluded.value", (key, value))


def refuse_unfinished(backend: Backend, conn: StoreConnection) -> None:
    """StoreError when a migration into this store started and has not finished: its tables hold part of another
    store, and a server writing beside it would give new runs ids the rest of the move then collides with (every
    new run dropped). The server refuses to start on it; `server migrate` resumes it. (Only a PostgreSQL store can be
    a migration's destination; only it has `rl_insight_meta`.)"""
    if not backend.has_table(conn, "rl_insight_meta"):
        return
    source = _meta(conn, "migrate:source")
    where = backend.location.display
    if source is not None and _meta(conn, "migrate:done") is None:
        raise StoreError(f"the run store {where} holds a migration from {source} that has not finished",
                         hint=f"resume it first (it goes on where it stopped): rl-insight server migrate "
                              f"--from {source} --to {where}")


def _columns_of(conn: Any, table: str, wanted: tuple[str, ...]) -> tuple[str, ...]:
    """Those of `wanted` that the source's `table` has (a column added by a later schema stays NULL in the copy)."""
    row = conn.execute(f"SELECT * FROM {table} LIMIT 0")
    have = {d[0] for d in row.description}
    return tuple(c for c in wanted if c in have)


def migrate(source: StoreLocation, destination: StoreLocation, *, chunk: int = 5000,
            progress: Callable[[str, int], object] = lambda table, n: None) -> MigrationReport:
    """Copy every table of `source` into `destination` (PostgreSQL), resumable; see the module docstring."""
    target = open_backend(destination)
    if not target.shared:
        raise StoreError("the destination of a migration must be a PostgreSQL store (postgresql://…)",
                         hint="a SQLite store is copied with `sqlite3 FILE .backup COPY`")
    if source.display == destination.display:
        raise StoreError(f"the source and the destination are the same store ({source.display})")
    origin = open_backend(source)
    src = origin.connect(readonly=True)
    dst = target.connect()
    try:
        return _move(origin, src, dst, source, chunk, progress)
    finally:
        src.close()
        dst.close()


def _move(source_backend: Backend, src: StoreConnection, dst: Any, source: StoreLocation, chunk: int,
          progress: Callable[[str, int], object]) -> MigrationReport:
    report = MigrationReport()
    origin = _meta(dst, "migrate:source")
    if origin is None:
        if dst.execute("SELECT count(*) FROM runs").fetchone()[0]:
            raise ConflictError(f"{dst.location.display} already holds runs of its own; a migration would mix ids",
                                hint="migrate into an empty database (createdb), then point the servers at it")
        _set_meta(dst, "migrate:source", source.display)
    elif origin != source.display:
        raise ConflictError(f"{dst.location.display} holds a migration from {origin}, not {source.display}",
                            hint="resume with the same --from, or use another database")
    else:
        report.resumed = True
    # (an older source lacks the newer tables and columns)
    present = [(t, k, _columns_of(src, t, c)) for t, k, c in TABLES if source_backend.has_table(src, t)]
    for table, key, columns in present:
        report.copied[table] = _copy_table(src, dst, table, key, columns, chunk, progress)
    # each series' totals from the samples moved (a source of any version may lack them)
    dst.execute(SERIES_TOTALS_RECOUNT)
    dst.execute(SERIES_PARTS_RECOUNT)  # each counter's sum across its processes, from the parts moved
    if not source_backend.has_table(src, "step_marks"):  # a source before version 12: its steps marked as it would
        dst.execute(STEP_MARKS_BACKFILL[1])  # have been by its migration
    for table in IDENTITY_TABLES:  # new rows written after the move get ids above the copied ones
        dst.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), coalesce((SELECT max(id) FROM {table}), "
                    "0) + 1, false)")
    for table, _, _ in present:
        report.counts[table] = (src.execute(f"SELECT count(*) FROM {table}").fetchone()[0],
                                dst.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    short = {t: c for t, c in report.counts.items() if c[0] != c[1]}
    if short:
        raise StoreError(f"after the migration the row counts differ: {short} (source, destination)",
                         hint="run the same command again to resume; nothing in the source was changed")
    for table, _, _ in present:  # the planner's statistics now, not whenever autovacuum reaches a bulk-loaded table
        dst.execute(f"ANALYZE {table}")  # (without them a step's distributions took 4x longer at 2M trajectories)
    _set_meta(dst, "migrate:done", json.dumps({t: c[1] for t, c in report.counts.items()}))
    return report


def _copy_table(src: Any, dst: Any, table: str, key: tuple[str, ...], columns: tuple[str, ...], chunk: int,
                progress: Callable[[str, int], object]) -> int:
    """Chunks of `table` in key order from where the last committed chunk stopped; the rows copied."""
    cols = ", ".join(columns)
    key_at = [columns.index(k) for k in key]
    marks = ", ".join("?" * len(columns))
    insert = f"INSERT INTO {table} ({cols}) VALUES ({marks}) ON CONFLICT DO NOTHING"
    order = ", ".join(key)
    after = f"({order}) > ({', '.join('?' * len(key))})"
    stored = _meta(dst, f"migrate:{table}")
    last: list[Any] | None = json.loads(stored) if stored else None
    copied = 0
    while True:
        where = f"WHERE {after} " if last is not None else ""
        rows = src.execute(f"SELECT {cols} FROM {table} {where}ORDER BY {order} LIMIT ?",
                           (*(last or ()), chunk)).fetchall()
        if not rows:
            return copied
        last = [rows[-1][i] for i in key_at]
        dst.execute("BEGIN")
        try:
            dst.executemany(insert, rows)
            _set_meta(dst, f"migrate:{table}", json.dumps(last))
            dst.execute("COMMIT")
        except BaseException:
            if dst.in_transaction:
                dst.execute("ROLLBACK")
            raise
        copied += len(rows)
        progress(table, copied)


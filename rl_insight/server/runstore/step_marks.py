"""The step as one stored fact: `step_marks` holds, per run and step metric, when each step ended — the first time
that metric said the step's number (a job logs `training/global_step` N when step N ends). This module owns it: the
rule (`mark_of`), the writer's side (`record`, in the batch's transaction) and the reader's (`marks`, `windows`);
the migration's backfill says the rule in SQL (backend/schema.py STEP_MARKS_BACKFILL; a test holds the two equal).
Every step window — the insights, the critical path, the Chrome trace, the ledger — and the step clock's seed read
it here; nothing recomputes the steps from the samples per query.

Invariants: a mark only moves earlier (`ts = min(ts, new)`), so a resend, a late sample or a restart that logs an
old step again changes nothing; a value that is not finite or lies past ±2**53 marks no step (it is no integer a
float holds exactly, and could not be stored); a run with no mark of a metric (a store written before version 12
with another step metric, or `export` naming another) is read from its samples by the same rule, so an answer
never depends on which path it came by.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from ...semantics.insights import step_windows
from .backend import StoreConnection
from .backend.schema import MAX_STEP

UPSERT_MARK = ("INSERT INTO step_marks (run_id, name, step, ts) VALUES (?, ?, ?, ?) ON CONFLICT (run_id, name, step) "
               "DO UPDATE SET ts = min(step_marks.ts, excluded.ts)")


def mark_of(value: float | None, ts: float) -> int | None:
    """The step a sample of the step metric marks (None: none): the one rule."""
    if value is None or not (math.isfinite(value) and math.isfinite(ts)) or abs(value) > MAX_STEP:
        return None
    return int(value)  # (towards zero, as SQLite's CAST and the migration's trunc)


def record(c: StoreConnection, rows: Iterable[tuple[int, str, float | None, float]], *, all_stored: bool) -> None:
    """Marks from (run id, series name, value, time) of step-metric samples offered to the store, in the writer's
    transaction; each (run, name, step) once, at its earliest time. `all_stored`: every sample offered was stored
    (the common case); else some were copies of stored ones, and those runs' marks are made again from their
    samples, so a mark never comes from a sample the store refused."""
    rows = list(rows)
    if not all_stored:
        for run_id, name in sorted({(r[0], r[1]) for r in rows}):
            samples = c.execute("SELECT p.ts, p.value FROM samples p JOIN series s ON s.id = p.series_id "
                                "WHERE s.run_id = ? AND s.name = ?", (run_id, name)).fetchall()
            c.insert_rows(UPSERT_MARK, [(run_id, name, step, ts) for ts, step in from_samples(samples)])
        return
    first: dict[tuple[int, str, int], float] = {}
    for run_id, name, value, ts in rows:
        step = mark_of(value, ts)
        if step is not None:
            key = (run_id, name, step)
            first[key] = min(ts, first.get(key, ts))
    if first:
        c.insert_rows(UPSERT_MARK, [(*key, ts) for key, ts in sorted(first.items())])


def marks(conn: StoreConnection, run_id: int, name: str) -> list[tuple[float, int]]:
    """(time, step) of every step of the run that metric `name` (sanitized) ended, in time order."""
    stored = conn.execute("SELECT ts, step FROM step_marks WHERE run_id = ? AND name = ? ORDER BY ts, step",
                          (run_id, name)).fetchall()
    if stored:
        return [(float(ts), int(step)) for ts, step in stored]
    # (a run with none: it ended no step, or its samples came before the writer marked this metric)
    return from_samples(conn.execute("SELECT p.ts, p.value FROM samples p JOIN series s ON s.id = p.series_id "
                                     "WHERE s.run_id = ? AND s.name = ?", (run_id, name)).fetchall())


def from_samples(samples: Sequence[tuple[float, float | None]]) -> list[tuple[float, int]]:
    """The marks (time, step) that (time, value) samples of a step metric make, by `mark_of`, in time order."""
    first: dict[int, float] = {}
    for ts, value in samples:
        step = mark_of(value, ts)
        if step is not None:
            first[step] = min(ts, first.get(step, ts))
    return sorted((ts, step) for step, ts in first.items())


def windows(conn: StoreConnection, run_id: int, name: str) -> list[tuple[int, int, int]]:
    """(step, start_ns, end_ns) of every step of the run that metric `name` (sanitized) marks: each step ends at its
    mark, the next begins there (semantics.insights.step_windows), and the first begins with the run (its first
    batch or state, whichever came first), so step 1 exists too (issue 51 item 7)."""
    ended = marks(conn, run_id, name)
    out = step_windows([(ts, float(step)) for ts, step in ended])
    if not ended:
        return out
    first_ts, first_step = ended[0]
    began = conn.execute("SELECT min(start_ns) FROM spans WHERE run_id = ?", (run_id,)).fetchone()[0]
    seen = conn.execute("SELECT first_seen FROM runs WHERE id = ?", (run_id,)).fetchone()
    start = min(int(seen[0] * 1e9) if seen else 2**63, began if began is not None else 2**63)
    end = int(first_ts * 1e9)
    if start < end and not any(n == first_step for n, _, _ in out):
        out.insert(0, (first_step, start, end))
    return out


def clock_moves(ended: Sequence[tuple[float, int]]) -> list[tuple[float, int]]:
    """The marks (time order) past every earlier one: the run's step clock as it moved (live/step_clock.py's rule:
    never back; a restart that logs old steps again moves nothing)."""
    out: list[tuple[float, int]] = []
    for ts, step in ended:
        if not out or step > out[-1][1]:
            out.append((ts, step))
    return out

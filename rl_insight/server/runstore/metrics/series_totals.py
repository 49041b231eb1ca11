"""Each series' sample count and last step, kept in `series` (schema 9) so the metrics list reads one row per series
instead of counting every sample (58,200 samples of a soak run: 2 ms on SQLite, 19 ms on PostgreSQL's heap).

Invariant: `series.n_samples` equals the rows of `samples` for that series and `series.last_step` their largest
step, on both engines, in the same transaction as the samples. Samples are unique per (series, time), so a resent
sample is not stored again: when every offered row was stored (the statement's row count says so, the common
case) the totals move by what the batch holds; when some were already there, the batch's series are counted again
from their samples (exact, and rare: a client resending what it was not sure had arrived).
"""

from __future__ import annotations

from typing import Sequence

from ..backend import StoreConnection
from ..backend.schema import SERIES_TOTALS_RECOUNT

_RECOUNT_ONE = SERIES_TOTALS_RECOUNT + " WHERE id = ?"
# (SQLite's two-argument max() is NULL when either is: a step-less batch keeps last_step; the cast types the
# parameter for PostgreSQL)
_ADD = ("UPDATE series SET n_samples = n_samples + ?, last_step = CASE WHEN CAST(? AS REAL) IS NULL THEN last_step "
        "ELSE max(coalesce(last_step, ?), ?) END WHERE id = ?")


def record(conn: StoreConnection, rows: Sequence[tuple], stored: int) -> None:
    """Move the totals for `rows` ((series id, step, ts, value), as offered to INSERT_SAMPLE), of which `stored` were
    new; inside the writer's transaction."""
    if not rows:
        return
    if stored != len(rows):
        conn.executemany(_RECOUNT_ONE, [(sid,) for sid in sorted({r[0] for r in rows})])
        return
    totals: dict[int, list] = {}
    for sid, step, _, _ in rows:
        t = totals.get(sid)
        if t is None:
            totals[sid] = [1, step]
        else:
            t[0] += 1
            if step is not None and (t[1] is None or step > t[1]):
                t[1] = step
    # in the order of the series' ids: servers of a fleet sharing a series lock its row in one order, never a
    # deadlock (one UPDATE … FROM unnest() on PostgreSQL measured the same and locks in its plan's order)
    conn.executemany(_ADD, [(n, step, step, step, sid) for sid, (n, step) in sorted(totals.items())])

"""The rows one transaction of the run store's writer writes, and what they tell each run.

Each sample and span becomes its row (its run's and series' ids looked up or created through the writer's
`Identities`, in key order); as they go by, each run they belong to is noted once: last seen, its largest step,
whether it finished, the earliest client time that is plausible, its longest span. `update_runs` writes those in run
id order at the end of the transaction (servers of a fleet lock runs in one order: never a deadlock).
"""

from __future__ import annotations

import json
from typing import Any

from ...protocol import SpanRecord
from .backend import StoreConnection
from .identities import Identities
from .rows import SampleRow

# client times older than this (by the server's clock, when written) never move a run's start
PLAUSIBLE_PAST_S = 86400.0
_encode_attributes = json.JSONEncoder(default=str).encode  # one encoder (json.dumps with options builds one a call)


class TransactionRows:
    def __init__(self, conn: StoreConnection, ids: Identities, now: float) -> None:
        self.conn, self.ids, self.now = conn, ids, now
        self.touched: dict[int, list[Any]] = {}  # run id -> [last seen, max step, final, earliest time, longest span]

    def touch(self, run_id: int, *, step: float | None = None, earliest: float | None = None,
              final: bool = False) -> None:
        t = self.touched.setdefault(run_id, [self.now, None, False, self.now, 0])
        if final:
            t[2] = True
        if step is not None and (t[1] is None or step > t[1]):
            t[1] = step
        # a client's time moves the run's start back only while plausible: one span at 1 ns (a node whose clock
        # says 1970) is stored, but never stretches the run to 57 years (the views' default windows start here)
        if earliest is not None and earliest >= self.now - PLAUSIBLE_PAST_S:
            t[3] = min(t[3], earliest)

    def run_of(self, r: SampleRow) -> int:
        """The id of `r`'s run (looked up or created once a transaction)."""
        return self.ids.run_id(self.conn, r.project, r.experiment_name, self.now)

    def sample(self, r: SampleRow) -> tuple:
        """The `samples` row (series id, step, time, value) of `r`."""
        run_id = self.ids.run_id(self.conn, r.project, r.experiment_name, self.now)
        sid = self.ids.series_id(self.conn, run_id, r.name, r.kind, r.labels, r.logged)
        self.touch(run_id, step=r.step, earliest=r.ts)
        return (sid, r.step, r.ts, r.value)

    def span(self, s: SpanRecord) -> tuple:
        """The `spans` row of `s` (a start's without its end)."""
        run_id = self.ids.run_id(self.conn, s.project, s.experiment_name, self.now)
        self.touch(run_id, earliest=s.start_ns / 1e9)
        if s.end_ns is not None and s.end_ns - s.start_ns > self.touched[run_id][4]:
            self.touched[run_id][4] = s.end_ns - s.start_ns  # the run's longest span bounds window scans from below
        attrs = _encode_attributes(s.attributes)
        if s.end_ns is None:
            return (run_id, s.id, s.trace_id, s.parent_id, s.name, s.lane or "", s.kind, s.start_ns, attrs)
        return (run_id, s.id, s.trace_id, s.parent_id, s.name, s.lane or "", s.kind, s.start_ns, s.end_ns, attrs)

    def update_runs(self, *, existing_only: bool = False) -> None:
        """What the rows told each run, in run id order (`existing_only`: skip a run a failed item's savepoint took
        back with it)."""
        for run_id, (seen, step, final, earliest, longest) in sorted(self.touched.items()):
            if existing_only and self.conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                continue
            # (SQLite's max() is NULL when any argument is: batches without a step keep last_step; the cast gives
            # PostgreSQL the parameter's type)
            self.conn.execute(
                "UPDATE runs SET last_seen = max(last_seen, ?), last_step = CASE WHEN CAST(? AS REAL) IS NULL "
                "THEN last_step "
                "ELSE max(coalesce(last_step, ?), ?) END, finished_at = ?, first_seen = min(first_seen, ?), "
                "max_span_ns = max(coalesce(max_span_ns, 0), ?) WHERE id = ?",
                (seen, step, step, step, seen if final else None, earliest, longest, run_id))

"""The run store writer's ids of runs and series: looked up or created once, then remembered.

Invariant: a batch creates the runs and series it needs in key order, before any of its rows are written
(`create_in_order`), so servers of a fleet creating the same ones at once on one PostgreSQL take their locks in one
order. Created as met, in each batch's own order, two servers handed the same new series in opposite orders
deadlocked (PostgreSQL then aborts one transaction: a whole batch lost to one of them). Ids created inside a
transaction that rolled back are forgotten with `clear()`.
"""

from __future__ import annotations

from typing import Any, Iterable

from ...protocol import SpanRecord
from .backend import StoreConnection
from .rows import SampleRow

RunKey = tuple[str, str]  # (project, experiment_name)
SeriesKey = tuple[int, str, str, str]  # (run id, name, kind, labels JSON)


class Identities:
    def __init__(self) -> None:
        self.runs: dict[RunKey, int] = {}
        self.series: dict[SeriesKey, int] = {}

    def clear(self) -> None:
        self.runs.clear()
        self.series.clear()

    def forget(self, run_ids: Iterable[int]) -> None:
        """After runs were deleted: their ids and their series' ids."""
        gone = set(run_ids)
        self.runs = {k: v for k, v in self.runs.items() if v not in gone}
        self.series = {k: v for k, v in self.series.items() if k[0] not in gone}

    def run_id(self, conn: StoreConnection, project: str, experiment: str, now: float) -> int:
        key = (project, experiment)
        rid = self.runs.get(key)
        if rid is None:
            conn.execute("INSERT INTO runs (project, experiment_name, first_seen, last_seen) VALUES (?, ?, ?, ?) "
                         "ON CONFLICT DO NOTHING", (project, experiment, now, now))
            rid = conn.execute("SELECT id FROM runs WHERE project = ? AND experiment_name = ?", key).fetchone()[0]
            self.runs[key] = rid
        return rid

    def series_id(self, conn: StoreConnection, run_id: int, name: str, kind: str, labels: str, logged: str = "") -> int:
        """The series' id, created when new, with the name as first logged (`actor/entropy`; NULL: as `name`)."""
        key = (run_id, name, kind, labels)
        sid = self.series.get(key)
        if sid is None:
            conn.execute("INSERT INTO series (run_id, name, kind, labels, logged_name) VALUES (?, ?, ?, ?, ?) "
                         "ON CONFLICT DO NOTHING", (*key, logged or None))
            sid = conn.execute("SELECT id FROM series WHERE run_id = ? AND name = ? AND kind = ? AND labels = ?",
                               key).fetchone()[0]
            self.series[key] = sid
        return sid

    def create_in_order(self, conn: StoreConnection, work: list[tuple[str, Any]], now: float) -> None:
        """The runs, then the series, that the batch's samples and spans need and this writer has not met, in key
        order (inside the batch's transaction, before its rows)."""
        samples: list[SampleRow] = [r for kind, payload in work if kind == "samples" for r in payload]
        spans: list[SpanRecord] = [s for kind, payload in work if kind == "spans" for part in payload for s in part]
        runs = {(r.project, r.experiment_name) for r in samples} | {(s.project, s.experiment_name) for s in spans}
        for project, experiment in sorted(runs - self.runs.keys()):
            self.run_id(conn, project, experiment, now)
        new: dict[SeriesKey, str] = {}
        for r in samples:
            key = (self.runs[(r.project, r.experiment_name)], r.name, r.kind, r.labels)
            if key not in self.series:
                new.setdefault(key, r.logged)
        for key in sorted(new):
            self.series_id(conn, *key, new[key])

"""A stored run's points for TensorBoard / W&B (`rl-insight export`, the live exporters' catch-up, the runs API's
CSV): its trainer scalars and its insight metrics per step, read from the run store and shaped by export/points.py."""

from __future__ import annotations

import math
import time
from typing import Any, Iterator, Mapping

from ....export import Point
from ....export.points import insight_points, series_tag
from ...runstore.backend import StoreConnection
from ...runstore.queries import get_run, stepped_samples
from ...runstore.steps.ledger import run_ledger
from ...runstore.steps.run_insights import run_insights


def store_points(conn: StoreConnection, run_id: int) -> Iterator[Point]:
    """Every sample of a run that has a step, in (tag, step) order, from the run store."""
    for name, labels, step, ts, value in stepped_samples(conn, run_id):
        if math.isfinite(value):
            yield Point(series_tag(name, labels), int(step), float(ts), float(value))


def run_insight_points(conn: StoreConnection, run: Mapping[str, Any], step_metric: str,
                       version_metric: str) -> list[Point]:
    """Insight metrics over the whole run, per step (for exports after the fact)."""
    frm, to = int(run["first_seen"] * 1e9), int(run["last_seen"] * 1e9) + 1
    summary = run_insights(conn, run["id"], frm, to, step_metric, version_metric)
    config = get_run(conn, run["id"], include_config=True).get("config")
    summary["ledger_steps"] = run_ledger(conn, run["id"], [(s["step"], s["start_ns"], s["end_ns"])
                                                           for s in summary["steps"]], time.time_ns(), config)["steps"]
    return list(insight_points(summary, run["last_seen"]))


def insight_rows(conn: StoreConnection, run: Mapping[str, Any], step_metric: str,
                 version_metric: str) -> list[tuple[str, str, int, float, float]]:
    """The insight metrics per step as CSV rows (name, labels, step, unix time, value)."""
    points = run_insight_points(conn, run, step_metric, version_metric)
    return [(p.tag, "{}", p.step, p.wall_time, p.value) for p in points]


def reader_insight_rows(reader: Any, run: Mapping[str, Any], step_metric: str,
                        version_metric: str) -> list[tuple[str, str, int, float, float]]:
    """`insight_rows` read through the run store's reader (this thread's connection)."""
    return insight_rows(reader.conn(), run, step_metric, version_metric)

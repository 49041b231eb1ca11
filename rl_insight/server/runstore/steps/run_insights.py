"""A run's insights over a window, read from the run store: whole steps from the stored per-step statistics
(step_stats.py), the partial steps at the window's edges from their spans, the step boundaries from the step metric
(the live rounds, the runs API, exports after the fact and the fleet's step clock read the same)."""

from __future__ import annotations

import time
from typing import Any

from ....semantics.names import sanitize_metric_name
from .. import queries as q
from .. import step_marks as marks
from ..backend import StoreConnection
from . import step_stats


def metric_samples(conn: StoreConnection, run_id: int, metric: str) -> list[tuple[float, float]]:
    """(unix ts, value) of every series of the run whose sanitized name equals `metric`'s."""
    return q.metric_values(conn, run_id, sanitize_metric_name(metric))


def run_step_windows(conn: StoreConnection, run_id: int, step_metric: str) -> list[tuple[int, int, int]]:
    """(step, start_ns, end_ns) of every step of the run, step 1 included (marks.windows)."""
    return marks.windows(conn, run_id, sanitize_metric_name(step_metric))


def median_step_s(conn: StoreConnection, run_id: int, step_metric: str, last: int = 50) -> float | None:
    """The run's median step time over its last `last` steps (seconds between the step clock's moves:
    marks.clock_moves); None with fewer than two steps."""
    times = [t for t, _ in marks.clock_moves(marks.marks(conn, run_id, sanitize_metric_name(step_metric)))]
    times = times[-(last + 1):]
    gaps = sorted(b - a for a, b in zip(times, times[1:]) if b > a)
    return gaps[len(gaps) // 2] if gaps else None


VERL_STALENESS = ("training/off_policy_trajectory_staleness_mean", "training/off_policy_trajectory_staleness_max")


def run_insights(conn: StoreConnection, run_id: int, from_ns: int, to_ns: int, step_metric: str, version_metric: str,
                 max_steps: int | None = None, stalled_min_s: float = 60.0) -> dict[str, Any]:
    """Every insight of a run over [from_ns, to_ns): whole steps from the stored per-step statistics,
    the partial steps at the edges from their spans (server/runstore/steps/step_stats.py)."""
    now = time.time_ns()
    windows = run_step_windows(conn, run_id, step_metric)
    summary = step_stats.window_insights(
        conn, run_id, from_ns, to_ns, now, windows, metric_samples(conn, run_id, version_metric), max_steps,
        stalled_min_s)
    if summary["staleness"] is None:  # verl reports its own staleness (separate-async trainer): use it
        mean, mx = (metric_samples(conn, run_id, m) for m in VERL_STALENESS)
        if mean:
            summary["staleness"] = {
                "mean": mean[-1][1],
                "max": (mx[-1][1] if mx else mean[-1][1]),
                "samples": len(mean),
                "source": "verl",
            }
    return summary

"""Insight metrics for live runs, recomputed in the background and exposed on /metrics.

Every `interval_s` the service summarizes the run store's newly completed steps (server/runstore/step_stats.py,
a bounded number per cycle) and computes the last `window_s` of each live run from those per-step
statistics plus the partial steps at the window's edges; the collector only copies the result.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Iterable

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from ... import insights
from ...batch_worker import Periodic
from ...names import sanitize_metric_name
from ..runstore import RunStoreReader, step_stats
from ..runstore import queries as q

log = logging.getLogger("rl_insight.server.insights")


def metric_samples(conn: Any, run_id: int, metric: str) -> list[tuple[float, float]]:
    """(unix ts, value) of every series of the run whose sanitized name equals `metric`'s."""
    return q.metric_values(conn, run_id, sanitize_metric_name(metric))


VERL_STALENESS = ("training/off_policy_trajectory_staleness_mean", "training/off_policy_trajectory_staleness_max")


def run_insights(conn: Any, run_id: int, from_ns: int, to_ns: int, step_metric: str, version_metric: str,
                 max_steps: int | None = None, stalled_min_s: float = 60.0) -> dict[str, Any]:
    """Every insight of a run over [from_ns, to_ns): whole steps from the stored per-step statistics,
    the partial steps at the edges from their spans (server/runstore/step_stats.py)."""
    now = time.time_ns()
    windows = insights.step_windows(metric_samples(conn, run_id, step_metric))
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


class InsightService:
    def __init__(self, reader: RunStoreReader, *, window_s: float, live_window_s: float, step_metric: str,
                 version_metric: str, interval_s: float = 15.0, writer: Any = None,
                 stalled_min_s: float = 60.0) -> None:
        self._stalled_min_s = stalled_min_s
        self._reader = reader
        self._writer = writer  # where per-step statistics are stored (None: every window is computed from spans)
        self._done: dict[int, tuple[set[int], set[int]]] = {}  # run id -> (steps, blocks) whose statistics are stored
        self._window_s = window_s
        self._live_window_s = live_window_s
        self._step_metric = step_metric
        self._version_metric = version_metric
        self._interval = interval_s
        self._lock = threading.Lock()
        self._latest: dict[tuple[str, str], dict[str, Any]] = {}
        self.failures: dict[int, str] = {}  # run id -> last error (kept for diagnosis)
        self.on_refresh: list[Any] = []  # callbacks taking {(project, experiment): summary} (live exporters)
        self.lead: Any = lambda: True  # () -> whether this server does the fleet's background work
        self._refresher = Periodic("insights", interval_s, self.refresh)  # a failed round is logged; the next comes

    def start(self) -> None:
        self._refresher.start()

    def stop(self) -> None:
        self._refresher.stop()

    def summarize_steps(self, conn: Any, run_id: int, budget: int = 2000) -> int:
        """Compute and store the statistics of up to `budget` complete steps not yet summarized."""
        if self._writer is None:
            return 0
        now = time.time_ns()
        windows = insights.step_windows(metric_samples(conn, run_id, self._step_metric))
        if run_id not in self._done:  # once per run and server start; then kept up to date here
            self._done[run_id] = (step_stats.stored_steps(conn, run_id), step_stats.stored_steps(conn, run_id, "block"))
        done, blocks_done = self._done[run_id]
        todo = step_stats.pending_steps(conn, run_id, windows, now, done)[:budget]
        rows = (
            step_stats.compute_steps(conn, run_id, todo, metric_samples(conn, run_id, self._version_metric), now)
            if todo
            else []
        )
        done.update(w[0] for w in todo)
        if len(todo) < budget:  # steps an older version summarized without their critical path: theirs now
            older = step_stats.steps_without_path(conn, run_id, budget - len(todo))
            rows += step_stats.compute_paths(conn, run_id, older, now)
            todo += older
        blocks = step_stats.complete_blocks(windows, done, blocks_done)
        if rows or blocks:
            self._writer.put_step_stats(rows, [(run_id, *b) for b in blocks])
            blocks_done.update(b[0] for b in blocks)
        return len(todo)

    def refresh(self) -> None:
        if not self.lead():  # several servers on one store: the lease holder summarizes and exposes (once)
            with self._lock:
                self._latest = {}
            return
        conn = self._reader.conn()
        now = time.time_ns()
        latest = {}
        budget = (
            500  # steps summarized per refresh over all runs (~2.5 s of one core): a backlog catches up over cycles
        )
        runs = q.list_runs(conn, self._live_window_s)
        ids = {r["id"] for r in runs}
        self._done = {k: v for k, v in self._done.items() if k in ids}  # a run removed by retention forgets its steps
        for run in runs:
            if budget > 0:
                try:
                    budget -= self.summarize_steps(conn, run["id"], budget)
                except Exception as exc:
                    log.warning("step statistics for run %s failed: %s", run["id"], exc)
            if run["status"] != "live":
                continue
            try:
                s = run_insights(
                    conn,
                    run["id"],
                    now - int(self._window_s * 1e9),
                    now,
                    self._step_metric,
                    self._version_metric,
                    max_steps=20,
                    stalled_min_s=self._stalled_min_s,
                )  # /metrics shows the last complete step
            except Exception as exc:  # one run's bad data never stops the others' insights
                self.failures[run["id"]] = f"{type(exc).__name__}: {exc}"
                log.warning("insights for run %s failed: %s", run["id"], exc)
                continue
            latest[(run["project"], run["experiment_name"])] = s
        with self._lock:
            self._latest = latest
        for callback in self.on_refresh:
            try:
                callback(latest)
            except Exception as exc:  # an exporter never stops the insights
                log.warning("insight callback failed: %s", exc)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            latest = dict(self._latest)
        p = "rl_insight_insight_"
        run_l = ["project", "experiment_name"]
        util = GaugeMetricFamily(
            p + "lane_utilization", "Fraction of the window a lane spent in a state", labels=run_l + ["lane"]
        )
        bubble = GaugeMetricFamily(
            p + "lane_bubble_ratio", "Fraction of the window a lane was idle", labels=run_l + ["lane"]
        )
        busy = GaugeMetricFamily(p + "state_busy_seconds", "Seconds each lane spent in each state during the window",
                                 labels=run_l + ["lane", "state"])
        overlap = GaugeMetricFamily(
            p + "rollout_training_overlap_ratio", "|generation ∩ training| / |generation ∪ training|", labels=run_l
        )
        tail = GaugeMetricFamily(
            p + "rollout_long_tail_ratio",
            "Slowest / median rollout lane generation time, last step",
            labels=run_l + ["slowest_lane"],
        )
        step = GaugeMetricFamily(
            p + "step_state_seconds", "Wall time per state in the last complete step", labels=run_l + ["state"]
        )
        wait = GaugeMetricFamily(
            p + "rollout_wait_seconds",
            "Last generation end to the next training start, last step (staleness as time)",
            labels=run_l,
        )
        stalled = GaugeMetricFamily(
            p + "stalled_lanes", "Lanes whose open state lasts far longer than usual", labels=run_l
        )
        stale = GaugeMetricFamily(
            p + "staleness", "Trainer parameter version minus rollout version", labels=run_l + ["stat"]
        )
        for (project, exp), s in latest.items():
            for lane, v in s["lanes"].items():
                util.add_metric([project, exp, lane], v["utilization"])
                bubble.add_metric([project, exp, lane], v["bubble_ratio"])
            for lane, per_state in s["busy"].items():
                for state, sec in per_state.items():
                    busy.add_metric([project, exp, lane, state], sec)
            overlap.add_metric([project, exp], s["overlap"]["overlap_ratio"])
            if s["long_tail"]:
                last = s["long_tail"][-1]
                tail.add_metric([project, exp, last["slowest_lane"]], last["ratio"])
            if s["steps"]:
                for state, sec in s["steps"][-1]["states"].items():
                    step.add_metric([project, exp, state], sec)
            if s.get("rollout_wait"):
                wait.add_metric([project, exp], s["rollout_wait"][-1]["wait_s"])
            stalled.add_metric([project, exp], len(s["stalled"]))
            if s["staleness"]:
                stale.add_metric([project, exp, "mean"], s["staleness"]["mean"])
                stale.add_metric([project, exp, "max"], s["staleness"]["max"])
        return [util, bubble, busy, overlap, tail, step, wait, stalled, stale]

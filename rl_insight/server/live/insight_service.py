"""Insight metrics for live runs, recomputed in the background and exposed on /metrics.

Every `interval_s` a round (`InsightRounds.run`) summarizes the run store's newly completed steps
(server/runstore/step_stats.py, a bounded number per round) and computes the last `window_s` of each live run from
those per-step statistics plus the partial steps at the window's edges. `InsightService` runs the rounds in a process
of their own (live/insight_process.py, the default) or on its thread, hands the statistics to the writer and keeps
the latest round's families already in Prometheus' text format (rendered where the round ran): /metrics only appends
those bytes, so a scrape costs the ingest loop no Python per lane.

Invariants: one round at a time; a run's failure costs only that run's insights; a failed round leaves none.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ... import insights
from ...batch_worker import Periodic
from ...errors import ConfigError
from ...names import sanitize_metric_name
from ..config import INSIGHTS_WORKERS
from ..runstore import RunStoreReader, step_stats
from ..runstore import queries as q

if TYPE_CHECKING:
    from .insight_process import InsightProcess

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


def insight_families(latest: dict[tuple[str, str], dict[str, Any]]) -> list[Metric]:
    """Each live run's insights, by (project, experiment_name), as gauge families."""
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


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


def render_insights(latest: dict[tuple[str, str], dict[str, Any]]) -> bytes:
    """`latest`'s families in Prometheus' text format. Rendered once a round, where the round ran (the insight
    process by default): at a thousand clients (5,000 lanes, three series each) it is 1.8 MB and ~0.3 s of Python,
    which each scrape of /metrics would otherwise spend holding the ingest loop's GIL."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(insight_families(latest)))
    return generate_latest(registry)


@dataclass
class InsightRound:
    """What one refresh computed: the insights of each live run, by (project, experiment_name); the per-step statistics
    to store, one (rows, blocks) per run in order; why a run's insights failed, by run id."""

    latest: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    exposition: bytes = b""  # `latest` as /metrics shows it (render_insights)
    step_stats: list[tuple[list[Any], list[tuple[Any, ...]]]] = field(default_factory=list)
    failures: dict[int, str] = field(default_factory=dict)


class InsightRounds:
    """Computes refreshes from a reader of the run store. It keeps which steps' statistics it handed over already, so
    it lives as long as its process: the server's (`insights_worker: thread`) or live/insight_process.py's child."""

    # steps summarized per round over all runs (~2.5 s of one core): a backlog catches up over rounds
    STEP_BUDGET = 500

    def __init__(self, reader: RunStoreReader, *, window_s: float, live_window_s: float, step_metric: str,
                 version_metric: str, summarize: bool = True, stalled_min_s: float = 60.0) -> None:
        self._reader = reader
        self._summarize = summarize  # False: nothing stores the statistics; every window is computed from spans
        self._window_s, self._live_window_s = window_s, live_window_s
        self._step_metric, self._version_metric = step_metric, version_metric
        self._stalled_min_s = stalled_min_s
        self._done: dict[int, tuple[set[int], set[int]]] = {}  # run id -> (steps, blocks) whose statistics are stored

    def summarize_steps(self, conn: Any, run_id: int, out: InsightRound, budget: int = 2000) -> int:
        """The statistics of up to `budget` complete steps not yet summarized, into `out`; how many steps."""
        if not self._summarize:
            return 0
        now = time.time_ns()
        windows = insights.step_windows(metric_samples(conn, run_id, self._step_metric))
        if run_id not in self._done:  # once per run and process start; then kept up to date here
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
            out.step_stats.append((rows, [(run_id, *b) for b in blocks]))
            blocks_done.update(b[0] for b in blocks)
        return len(todo)

    def run(self) -> InsightRound:
        conn = self._reader.conn()
        now = time.time_ns()
        out = InsightRound()
        budget = self.STEP_BUDGET
        runs = q.list_runs(conn, self._live_window_s)
        ids = {r["id"] for r in runs}
        self._done = {k: v for k, v in self._done.items() if k in ids}  # a run removed by retention forgets its steps
        for run in runs:
            if budget > 0:
                try:
                    budget -= self.summarize_steps(conn, run["id"], out, budget)
                except Exception as exc:
                    log.warning("step statistics for run %s failed: %s", run["id"], exc)
            if run["status"] != "live":
                continue
            try:
                s = run_insights(conn, run["id"], now - int(self._window_s * 1e9), now, self._step_metric,
                                 self._version_metric, max_steps=20,
                                 stalled_min_s=self._stalled_min_s)  # /metrics shows the last complete step
            except Exception as exc:  # one run's bad data never stops the others' insights
                out.failures[run["id"]] = f"{type(exc).__name__}: {exc}"
                log.warning("insights for run %s failed: %s", run["id"], exc)
                continue
            out.latest[(run["project"], run["experiment_name"])] = s
        out.exposition = render_insights(out.latest)
        return out

    def close(self) -> None:
        """(Nothing to stop here: InsightProcess's counterpart ends its child.)"""


class InsightService:
    """Refreshes the insights every `interval_s` (on the fleet's lease holder only) and exposes the latest on /metrics.

    The rounds run where `worker` says: "process" (the server's default, live/insight_process.py: a round is ~1 s of
    Python at a thousand clients, which in this process would hold the ingest loop's GIL) or "thread" (here, on the
    refresh thread). The per-step statistics a round computed are handed to `writer` here; `on_refresh` callbacks get
    its insights; `health()` says how the last round went (/healthz). A round that fails leaves no insights (none
    rather than stale ones) until the next succeeds."""

    def __init__(self, reader: RunStoreReader, *, window_s: float, live_window_s: float, step_metric: str,
                 version_metric: str, interval_s: float = 15.0, writer: Any = None,
                 stalled_min_s: float = 60.0, worker: str = "thread") -> None:
        options: dict[str, Any] = {"window_s": window_s, "live_window_s": live_window_s, "step_metric": step_metric,
                                   "version_metric": version_metric, "summarize": writer is not None,
                                   "stalled_min_s": stalled_min_s}
        self._rounds: InsightRounds | InsightProcess
        if worker == "process":
            from .insight_process import InsightProcess

            self._rounds = InsightProcess(reader.location, options)
        elif worker == "thread":
            self._rounds = InsightRounds(reader, **options)
        else:
            raise ConfigError(f"insights_worker {worker!r} is not one of {', '.join(INSIGHTS_WORKERS)}")
        self._writer = writer  # where per-step statistics are stored
        self._worker = worker
        self._rounds_done = self._rounds_failed = 0
        self._last_round: tuple[float, float, str | None] | None = None  # (unix end, seconds, error)
        self._lock = threading.Lock()
        self._exposition = b""  # the latest round's families (render_insights): each scrape only copies them
        self.failures: dict[int, str] = {}  # run id -> last error (kept for diagnosis)
        self.on_refresh: list[Any] = []  # callbacks taking {(project, experiment): summary} (live exporters)
        self.lead: Any = lambda: True  # () -> whether this server does the fleet's background work
        self._refresher = Periodic("insights", interval_s, self.refresh)  # a failed round is logged; the next comes

    def start(self) -> None:
        self._refresher.start()

    def stop(self) -> None:
        self._refresher.stop()
        self._rounds.close()

    def refresh(self) -> None:
        if not self.lead():  # several servers on one store: the lease holder summarizes and exposes (once)
            with self._lock:
                self._exposition = b""
            return
        began = time.monotonic()
        try:
            result = self._rounds.run()
        except Exception as exc:
            with self._lock:
                self._exposition = b""
                self._rounds_failed += 1
                self._last_round = (time.time(), time.monotonic() - began, f"{type(exc).__name__}: {exc}")
            log.warning("insight refresh failed: %s", exc)
            return
        if self._writer is not None:
            for rows, blocks in result.step_stats:
                self._writer.put_step_stats(rows, blocks)
        self.failures.update(result.failures)
        with self._lock:
            self._exposition = result.exposition
            self._rounds_done += 1
            self._last_round = (time.time(), time.monotonic() - began, None)
        for callback in self.on_refresh:
            try:
                callback(result.latest)
            except Exception as exc:  # an exporter never stops the insights
                log.warning("insight callback failed: %s", exc)

    def health(self) -> dict[str, Any]:
        """Where the rounds run, how many succeeded and failed, and the last one: when it ended, how long it took
        (the child's CPU priority is lower: on a busy machine it takes longer), why it failed."""
        with self._lock:
            last = self._last_round
            body: dict[str, Any] = {"worker": self._worker, "rounds": self._rounds_done,
                                    "failed_rounds": self._rounds_failed,
                                    "last_round_at": None if last is None else round(last[0], 3),
                                    "last_round_s": None if last is None else round(last[1], 3),
                                    "last_error": None if last is None else last[2]}
        if not isinstance(self._rounds, InsightRounds):
            body["process_starts"] = self._rounds.starts
        return body

    def exposition(self) -> bytes:
        """The latest round's insight families in Prometheus' text format (render_insights), for /metrics."""
        with self._lock:
            return self._exposition

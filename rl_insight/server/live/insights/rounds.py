"""Insight rounds: what one round of the live insights computes, wherever it runs (the server's thread, or
live/insights/process.py's child). A round summarizes the run store's newly completed steps (server/runstore/
step_stats.py, a bounded number per round) and computes the last `window_s` of each live run from those per-step
statistics plus the partial steps at the window's edges, rendered to Prometheus' text format where it ran.

Invariants: a run's failure costs only that run's insights; a failed round leaves none.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ...runstore import queries as q
from ...runstore.reader import RunStoreReader
from ...runstore.steps import step_stats
from ...runstore.steps.ledger import rollout_devices, run_ledger, stored_lane_seconds, weigh
from ...runstore.steps.run_insights import metric_samples, run_insights, run_step_windows

log = logging.getLogger("rl_insight.server.insights")


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
    ledger_s = CounterMetricFamily("rl_insight_ledger_seconds", "Device-seconds of the run's summarized steps by "
                                   "ledger reason (docs/ledger.md)", labels=run_l + ["reason"])
    goodput = GaugeMetricFamily(p + "goodput_ratio", "Training device-seconds over all of them, the run's summarized "
                                "steps (docs/ledger.md)", labels=run_l)
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
        if s.get("ledger"):
            for reason, sec in s["ledger"].items():
                ledger_s.add_metric([project, exp, reason], sec)
            total = sum(s["ledger"].values())
            if total > 0:
                goodput.add_metric([project, exp], s["ledger"].get("training", 0.0) / total)
    return [util, bubble, busy, overlap, tail, step, wait, stalled, stale, ledger_s, goodput]


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
    it lives as long as its process: the server's (`insights_worker: thread`) or live/insights/process.py's child."""

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
        # run id -> its summarized steps' ledger lane-seconds by "class:reason" (read once per process, then kept up
        # to date with the steps summarized here): the counters rl_insight_ledger_seconds_total
        self._ledger: dict[int, dict[str, float]] = {}

    def summarize_steps(self, conn: Any, run_id: int, out: InsightRound, budget: int = 2000) -> int:
        """The statistics of up to `budget` complete steps not yet summarized, into `out`; how many steps."""
        if not self._summarize:
            return 0
        now = time.time_ns()
        windows = run_step_windows(conn, run_id, self._step_metric)
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
        if run_id not in self._ledger:
            self._ledger[run_id] = stored_lane_seconds(conn, run_id)
        totals = self._ledger[run_id]
        for row in rows:  # (run_id, step, start, end, lane, name, value)
            if row[4] == "@ledger":
                totals[row[5]] = totals.get(row[5], 0.0) + row[6]
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
        self._ledger = {k: v for k, v in self._ledger.items() if k in ids}
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
            if self._ledger.get(run["id"]):  # device-seconds by reason over the run's summarized steps
                config = q.get_run(conn, run["id"], include_config=True).get("config")
                s["ledger"] = weigh(self._ledger[run["id"]], {}, rollout_devices(config)[0])[0]
                # the window's summarized steps, one by one (the TensorBoard / W&B exporters)
                s["ledger_steps"] = run_ledger(conn, run["id"], [(x["step"], x["start_ns"], x["end_ns"])
                                                                 for x in s["steps"]], now, config, fallback=0)["steps"]
            out.latest[(run["project"], run["experiment_name"])] = s
        out.exposition = render_insights(out.latest)
        return out

    def close(self) -> None:
        """(Nothing to stop here: InsightProcess's counterpart ends its child.)"""

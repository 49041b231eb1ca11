"""Per-step insight statistics: any window answered from stored steps plus raw edges equals the insights
computed from every span of the window (the definition, rl_insight/semantics/insights.py)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rl_insight.protocol import SpanRecord
from rl_insight.semantics import insights
from rl_insight.server.runstore import queries as q
from rl_insight.server.runstore.backend.location import StoreLocation
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.steps import step_stats
from rl_insight.server.runstore.writer import RunStoreWriter

S = 10**9
T0 = 1_790_000_000 * S
ID = {"project": "p", "experiment_name": "e"}


def _build(path: Path | StoreLocation, steps: int = 30,
           t0: int = T0) -> tuple[RunStoreWriter, list[tuple[float, float]], list[tuple[float, float]]]:
    """A run of `steps` 2 s steps from `t0` (ns): 3 rollout replicas (one a long tail on odd steps), 2 trainer ranks,
    the step and parameter-version metrics, and one generation still open at the end."""
    rng = random.Random(7)
    w = RunStoreWriter(path, flush_interval_s=0.01)
    spans, step_samples, versions, seq = [], [], [], 0

    def add(name: str, lane: str, a: int, b: int | None, attrs: dict | None = None, kind: str = "state") -> None:
        nonlocal seq
        seq += 1
        spans.append(SpanRecord(f"{seq:016x}", "t" * 32, None, name, lane, kind, a, b, {**ID, **(attrs or {})}))

    for step in range(1, steps + 1):
        base = t0 + (step - 1) * 2 * S
        for r in range(3):  # replica 2 is the long tail on odd steps; generation overlaps the previous step's training
            d = int(0.8 * S * rng.uniform(0.7, 1.0) * (1.8 if r == 2 and step % 2 else 1.0))
            add(
                "vllm_generate",
                f"replica_{r}",
                base - S // 3,
                base - S // 3 + d,
                {"param_version": step - 1 - (r == 1)},
            )
            add("update_weights", f"replica_{r}", base + int(1.7 * S), base + int(1.8 * S))
        for k in range(2):
            a = base + int(0.6 * S * rng.uniform(0.9, 1.1))
            add("train_batch", f"rank_{k}", a, a + int(0.9 * S))
            add("actor_update", f"rank_{k}", a + S // 10, a + int(0.8 * S), kind="state_child")
        step_samples.append(((base + 2 * S) / S, float(step)))
        versions.append(((base + int(1.75 * S)) / S, float(step)))
    add("vllm_generate", "replica_0", t0 + steps * 2 * S + S // 2, None)  # still running
    w.put_spans([spans[-1]], spans[:-1])
    w.put_samples([SampleRow("p", "e", "training_global_step", "gauge", "{}", v, ts, v) for ts, v in step_samples])
    w.put_samples([SampleRow("p", "e", "current_param_version", "gauge", "{}", v, ts, v) for ts, v in versions])
    assert w.flush()
    return w, step_samples, versions


def _close(a: dict, b: dict, what: str) -> None:
    a = {k: v for k, v in a.items() if not (isinstance(v, float) and abs(v) < 1e-9)}
    b = {k: v for k, v in b.items() if not (isinstance(v, float) and abs(v) < 1e-9)}
    assert set(a) == set(b), (what, set(a) ^ set(b))
    for k in a:
        if isinstance(a[k], dict):
            _close(a[k], b[k], f"{what}.{k}")
        elif isinstance(a[k], float):
            assert a[k] == pytest.approx(b[k], rel=1e-9, abs=1e-6), (what, k, a[k], b[k])
        else:
            assert a[k] == b[k], (what, k)


@pytest.fixture(autouse=True)
def _small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(step_stats, "BLOCK", 8)  # a 30-step run then has blocks, single steps and raw edges


@pytest.mark.parametrize("window", [(0, 60), (3.3, 17.9), (10, 12), (10.5, 10.9), (-5, 80), (21.0, 40.0)])
def test_window_from_stored_steps_equals_the_raw_definition(store_at: StoreLocation,
                                                            window: tuple[float, float]) -> None:
    w, step_samples, versions = _build(store_at)
    conn = RunStoreReader(store_at).conn()
    now = T0 + 200 * S
    windows = insights.step_windows(step_samples)
    todo = step_stats.pending_steps(conn, 1, windows, now)
    assert [x[0] for x in todo] == [x[0] for x in windows]  # nothing stored yet
    done = {x[0] for x in todo}
    blocks = step_stats.complete_blocks(windows, done, set())
    assert blocks  # 30 steps: a block of the first step_stats.BLOCK of them
    w.put_step_stats(step_stats.compute_steps(conn, 1, todo, versions, now), [(1, *b) for b in blocks])
    assert w.flush()
    assert step_stats.pending_steps(conn, 1, windows, now) == []
    assert step_stats.stored_steps(conn, 1, "block") == {b[0] for b in blocks}
    t0, t1 = T0 + int(window[0] * S), T0 + int(window[1] * S)
    fast = step_stats.window_insights(conn, 1, t0, t1, now, windows, versions)
    raw_spans = q.spans_in(conn, 1, t0, t1)
    raw = insights.summarize(raw_spans, t0, t1, now, step_samples, versions)
    _close(fast["lanes"], _lanes(raw_spans, fast, t0, t1, now), "lanes")
    _close(fast["busy"], raw["busy"], "busy")
    _close(fast["overlap"], raw["overlap"], "overlap")
    # steps overlapping the window, each as a whole step (its own window's spans, even where the query window cuts it)
    assert [s["step"] for s in fast["steps"]] == [s["step"] for s in raw["steps"]]
    tails = {t["step"]: t for t in fast["long_tail"]}
    for f in fast["steps"]:
        ref = insights.summarize(q.spans_in(conn, 1, f["start_ns"], f["end_ns"]), f["start_ns"], f["end_ns"], now,
                                 step_samples, versions)
        one = next(x for x in ref["steps"] if x["step"] == f["step"])
        _close(f["states"], one["states"], f"step {f['step']}")
        # the step's bubbles: the share of lane time idle within the step, over the lanes that worked in it
        util = [v["utilization"] for v in ref["lanes"].values()]
        assert f["bubble_ratio"] == pytest.approx(1 - sum(util) / len(util), abs=1e-9)
        ref_tail = next((t for t in ref["long_tail"] if t["step"] == f["step"]), None)
        assert (ref_tail is None) == (f["step"] not in tails)
        if ref_tail:
            assert (tails[f["step"]]["slowest_lane"], tails[f["step"]]["ratio"]) == (
                ref_tail["slowest_lane"],
                pytest.approx(ref_tail["ratio"]),
            )
    # rollout wait per step: each step's own spans (and the step before it), as a whole step
    waits = {w["step"]: w["wait_s"] for w in fast["rollout_wait"]}
    for f in fast["steps"]:
        a, b = f["start_ns"], f["end_ns"]
        ref = insights.rollout_wait(q.spans_in(conn, 1, a - (b - a), b), [(f["step"], a, b)], now)
        assert ([r["wait_s"] for r in ref] or [None])[0] == (
            pytest.approx(waits[f["step"]]) if f["step"] in waits else None
        )
    # staleness counts the generation states that ended inside the window
    ended = [s for s in raw_spans if s["end_ns"] is not None and t0 <= s["end_ns"] < t1]
    values = insights.staleness_values(ended, versions, now)
    if values:
        assert fast["staleness"]["samples"] == len(values)
        assert fast["staleness"]["mean"] == pytest.approx(sum(values) / len(values))
    else:
        assert fast["staleness"] is None
    w.close()


def _lanes(spans: list, fast: dict, t0: int, t1: int, now: int) -> dict:
    """The reference utilization from the spans, with the stalls the server named taken off (the server judges a
    stall on the run's whole stored history; a window's spans alone would judge it on a shorter one)."""
    return insights.without_stalls(insights.lane_utilization(spans, t0, t1, now), fast["stalled"], t0, t1, now)


def test_windows_without_stored_steps_fall_back_to_spans_and_open_states_are_seen(store_at: StoreLocation) -> None:
    w, step_samples, versions = _build(store_at, steps=6)
    conn = RunStoreReader(store_at).conn()
    now = T0 + 6 * 2 * S + 3600 * S  # the open state has run for an hour: stalled (no history needed)
    windows = insights.step_windows(step_samples)
    t0, t1 = T0, now
    fast = step_stats.window_insights(conn, 1, t0, t1, now, windows, versions)
    _close(fast["lanes"], _lanes(q.spans_in(conn, 1, t0, t1), fast, t0, t1, now), "lanes")
    assert [s["lane"] for s in fast["stalled"]] == ["replica_0"]
    w.close()


def test_a_window_scan_reads_only_from_the_runs_longest_span(store_at: StoreLocation) -> None:
    """spans_in is bounded below by the run's longest finished span (plus open spans): same answer as a full scan."""
    w, _, _ = _build(store_at)
    conn = RunStoreReader(store_at).conn()
    longest = conn.execute("SELECT max_span_ns FROM runs WHERE id = 1").fetchone()[0]
    assert longest == conn.execute("SELECT max(end_ns - start_ns) FROM spans").fetchone()[0]
    a, b = T0 + 20 * S, T0 + 30 * S
    got = {s["id"] for s in q.spans_in(conn, 1, a, b)}
    want = {
        r[0] for r in conn.execute("SELECT id FROM spans WHERE start_ns < ? AND (end_ns IS NULL OR end_ns > ?)", (b, a))
    }
    assert got == want
    w.close()


def test_steps_summarized_before_the_critical_path_get_theirs(store_at: StoreLocation) -> None:
    """A store written by an older version has no path rows: they are found, computed once and stored; until then a
    window's facts come from the spans, and the answers agree."""
    from rl_insight.server.runstore.steps import explain

    w, step_samples, versions = _build(store_at, steps=6)
    conn = RunStoreReader(store_at).conn()
    now = T0 + 200 * S
    windows = insights.step_windows(step_samples)
    rows = step_stats.compute_steps(conn, 1, windows, versions, now)
    old = [r for r in rows if r[4] not in ("@cp", "@cplane", "@whatif")]
    assert len(old) < len(rows)
    w.put_step_stats(old)
    assert w.flush()
    missing = step_stats.steps_without_path(conn, 1, 100)
    assert [m[0] for m in missing] == [x[0] for x in windows]
    from_spans, pending = explain.step_facts(conn, 1, windows, now)
    assert pending == [] and all("bubbles" in f["whatif"] for f in from_spans.values())
    w.put_step_stats(step_stats.compute_paths(conn, 1, missing, now))
    assert w.flush()
    assert step_stats.steps_without_path(conn, 1, 100) == []
    stored, _ = explain.step_facts(conn, 1, windows, now)
    for s, f in stored.items():
        assert f["whatif"] == pytest.approx(from_spans[s]["whatif"]) and f["cp"] == pytest.approx(from_spans[s]["cp"])
    w.close()

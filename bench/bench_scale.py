"""The run page at a real job's scale (issue 12): the soak `rl-insight demo --replicas 64 --ranks 64
--step-seconds 0.5 --steps 600` rebuilt directly in a run store (same lanes, states and metric
count, without waiting 5 minutes), then the queries the run page and /metrics make.

    python bench/bench_scale.py [--steps 600] [--scale 1]     # --scale 10: ten times the steps
    python bench/bench_scale.py --backends sqlite,postgresql  # the same store on both, queries interleaved

Reports, for each query, the median of 3 and the size of the answer.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import machine, timed

from rl_insight.protocol import SpanRecord
from rl_insight.server.runstore import queries as q
from rl_insight.server.runstore.backend import open_backend
from rl_insight.server.runstore.backend.location import StoreLocation, parse_store, sqlite_location
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.spans import timeline
from rl_insight.server.runstore.steps.run_insights import run_insights
from rl_insight.server.runstore.writer import RunStoreWriter

S = 10**9
ID = {"project": "bench", "experiment_name": "soak"}


def build(path: Path | StoreLocation, steps: int, replicas: int, ranks: int, step_s: float) -> tuple[int, int]:
    """Per step: each replica generates (3 requests' worth of vllm_generate, long tail on one replica) and
    syncs weights; each rank computes log probs, then train_batch with a nested actor_update."""
    rng = random.Random(0)
    w = RunStoreWriter(path, flush_interval_s=0.05)
    t0 = time.time_ns() - int(steps * step_s * S) - 60 * S
    n_spans = n_samples = 0
    seq = 0

    def span(name: str, lane: str, a: int, b: int, parent: str | None = None) -> SpanRecord:
        nonlocal seq
        seq += 1
        return SpanRecord(f"{seq:016x}", f"{seq // 1000:032x}", parent, name, lane, "state", a, b, dict(ID))

    for step in range(1, steps + 1):
        base = t0 + int((step - 1) * step_s * S)
        gen_end = base + int(0.4 * step_s * S)
        spans = []
        tail = step % replicas
        for r in range(replicas):
            t = base
            for k in range(3):
                d = int(0.4 * step_s * S / 3 * rng.uniform(0.5, 1.0) * (1.6 if r == tail and k == 2 else 1.0))
                spans.append(span("vllm_generate", f"replica_{r}", t, min(t + d, gen_end)))
                t += d
            spans.append(
                span("update_weights", f"replica_{r}", base + int(0.92 * step_s * S), base + int(0.97 * step_s * S))
            )
        for k in range(ranks):
            a = gen_end
            for name, frac in (("actor_compute_log_prob", 0.1), ("ref_compute_log_prob", 0.1)):
                b = a + int(frac * step_s * S * rng.uniform(0.9, 1.1))
                spans.append(span(name, f"rank_{k}", a, b))
                a = b
            b = a + int(0.25 * step_s * S)
            outer = span("train_batch", f"rank_{k}", a, b)
            spans.append(outer)
            inner = span("actor_update", f"rank_{k}", a + (b - a) // 20, b - (b - a) // 20, outer.id)
            inner.kind = "state"
            spans.append(inner)
        w.put_spans([], spans)
        n_spans += len(spans)
        ts = (base + step_s * S) / S
        rows = [SampleRow("bench", "soak", "training_global_step", "gauge", "{}", float(step), ts, float(step))]
        rows += [
            SampleRow("bench", "soak", f"metric_{i:02d}", "gauge", "{}", float(step), ts, rng.random())
            for i in range(96)
        ]
        w.put_samples(rows)
        n_samples += len(rows)
        if step % 200 == 0:
            w.flush(600)  # stay under the writer's queue bound (it drops, counted, beyond it)
    w.flush(1200)
    assert not w.stats.dropped, f"the writer dropped {w.stats.dropped} items: {w.stats.by_reason}"
    w.close()
    return n_spans, n_samples




def catch_up_summary(path: Path | StoreLocation) -> tuple[float, int]:
    """What the writer does in the background, a 0.2 s slice every 5 s, here to the end: the timeline's
    level-of-detail summary of every span written (runstore/spans/span_lod.py). Returns (seconds, buckets built)."""
    w = RunStoreWriter(path)
    t0 = time.perf_counter()
    with w.conn_lock:
        w.span_summary.run(w._conn, now=True)
        while w.span_summary.backlog:
            w.span_summary.run(w._conn, now=True)
    took, built = time.perf_counter() - t0, w.span_summary.buckets_built
    w.close()
    return took, built


def summarize_steps(path: Path | StoreLocation, conn: Any) -> list:
    """What the server's insight service does in the background as steps complete (here: all at once): the per-step
    statistics the insights and the step table read. Returns the steps summarized."""
    from rl_insight.semantics import insights as ins
    from rl_insight.server.runstore.steps import step_stats
    from rl_insight.server.runstore.steps.run_insights import metric_samples

    w = RunStoreWriter(path)
    windows = ins.step_windows(metric_samples(conn, 1, "training/global_step"))
    todo = step_stats.pending_steps(conn, 1, windows, time.time_ns())
    blocks = step_stats.complete_blocks(windows, {x[0] for x in todo}, set())
    w.put_step_stats(step_stats.compute_steps(conn, 1, todo, [], time.time_ns()), [(1, *b) for b in blocks])
    w.flush(1200)
    w.close()
    return todo


def _store(backend: str, d: Path, cluster: list) -> StoreLocation:
    if backend == "sqlite":
        return sqlite_location(d / "runstore.sqlite")
    if not cluster:  # a throwaway PostgreSQL 15 cluster, as the tests start one (tests/pg_cluster.py)
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.pg_cluster import PASSWORD, PostgresCluster

        cluster.append(PostgresCluster())
        cluster[0].wait_ready()
        os.environ["RL_INSIGHT_STORE_PASSWORD"] = PASSWORD
    return parse_store(cluster[0].url(cluster[0].create_database("soak")), d)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--scale", type=int, default=1, help="multiply the steps (10: the 10x soak)")
    ap.add_argument("--replicas", type=int, default=64)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--backends", default="sqlite", help="comma-separated: sqlite,postgresql (the latter in a "
                                                         "throwaway postgresql-15 cluster); queries interleaved")
    ap.add_argument("--skip-trace", action="store_true", help="leave out the trace.json export (slow under "
                                                              "tracemalloc)")
    args = ap.parse_args()
    steps = args.steps * args.scale
    print(f"machine: {machine()}")
    d = Path(tempfile.mkdtemp(prefix="rl-scale-bench-"))
    cluster: list = []
    conns, bounds = {}, {}
    try:
        for backend in args.backends.split(","):
            where = _store(backend, d, cluster)
            t0 = time.perf_counter()
            n_spans, n_samples = build(where, steps, args.replicas, args.ranks, 0.5)
            built = time.perf_counter() - t0
            conn = conns[backend] = RunStoreReader(where).conn()
            print(f"  {backend}: {n_spans:,} spans on {args.replicas + args.ranks} lanes, {n_samples:,} samples, "
                  f"{open_backend(where).used_bytes(conn) / 2**20:.0f} MiB, built in {built:.0f} s "
                  f"({n_spans / built:,.0f} spans/s)")
            bounds[backend] = q.span_bounds(conn, 1)
            took, buckets = catch_up_summary(where)
            items = conn.execute("SELECT count(*) FROM span_lod").fetchone()[0]
            print(f"  {backend}: timeline summary caught up in {took:.1f} s ({buckets:,} buckets, {items:,} items; "
                  f"in the background as spans arrive)")
            t0 = time.perf_counter()
            todo = summarize_steps(where, conn)
            took = time.perf_counter() - t0
            print(f"  {backend}: per-step statistics of {len(todo):,} steps: {took:.1f} s "
                  f"({took / max(1, len(todo)) * 1000:.1f} ms a step, once per step in the background)")
        queries(conns, bounds)
        if not args.skip_trace:
            for backend, conn in conns.items():
                trace(backend, conn)
    finally:
        for c in cluster:
            c.stop()


def queries(conns: dict, bounds: dict) -> None:
    """Each query on each backend in turn (interleaved: the machine's noise falls on both), median of 3."""
    names = list(conns)
    print("  query" + "".join(f" | {b}" for b in names) + (" | ratio" if len(names) == 2 else ""))
    lanes = [x["lane"] for x in q.lanes(conns[names[0]], 1)]
    page = lanes[:64]

    def row(label: str, make: Callable[[Any, int, int], Any], size: Callable[[Any], str] = lambda _: "") -> None:
        cells, times = [], []
        for b in names:
            lo, hi = bounds[b]
            t, out = timed(lambda: make(conns[b], lo, hi))
            times.append(t)
            cells.append(f"{t * 1000:.0f} ms{size(out)}")
        ratio = f" | {times[1] / times[0]:.2f}x" if len(times) == 2 else ""
        print(f"  {label} | " + " | ".join(cells) + ratio)

    windows = [("whole run", None, True), ("whole run, from the spans", None, False),
               ("10 minutes", 600 * S, True), ("10 minutes, from the spans", 600 * S, False),
               ("60 s", 60 * S, True), ("one step (0.5 s)", S // 2, True)]
    for label, span, summary in windows:
        def window(conn: Any, lo: int, hi: int, span: int | None = span, summary: bool = summary) -> Any:
            frm = lo if span is None else hi - span
            return timeline.spans_window(conn, 1, from_ns=frm, to_ns=hi, resolution_ns=max(0, (hi - frm) // 1500),
                                         lane_names=page, summary=summary)
        row(f"timeline, 64-lane page, {label}, 1,500 px", window, lambda out: f" ({len(out['spans']):,} items)")
    row("lanes?counts=true", lambda conn, lo, hi: q.lanes(conn, 1, counts=True))
    for w in (60, 300, None):
        def insights(conn: Any, lo: int, hi: int, w: int | None = w) -> Any:
            return run_insights(conn, 1, lo if w is None else hi - w * S, hi + 1, "training/global_step",
                                "current_param_version", 200)
        row(f"insights, {'whole run' if w is None else f'{w} s window'}", insights)
    row("series, 600 steps -> 1,000 points", lambda conn, lo, hi: q.series(conn, 1, "metric_01", points=1000))
    row("metrics list", lambda conn, lo, hi: q.metric_names(conn, 1))


def trace(backend: str, conn: Any) -> None:
    tracemalloc.start()
    t0 = time.perf_counter()
    first = None
    size = 0
    for chunk in q.chrome_trace_stream(conn, 1):
        first = first or time.perf_counter() - t0
        size += len(chunk)
    total = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"  {backend} trace.json: first bytes after {(first or 0) * 1000:.0f} ms, all {size / 2**20:.0f} MiB in "
          f"{total:.1f} s, peak Python memory {peak / 2**20:.0f} MiB (tracemalloc)")


if __name__ == "__main__":
    main()

"""Run store benchmarks: write rate, timeline query over 1,000 lanes x 1M spans, 100k-step series query,
and (with --browser) how long the run page takes to draw that timeline in headless Chromium.

    python bench/bench_runstore.py [--lanes 1000] [--spans-per-lane 1000] [--browser]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import free_port, machine, timed

from rl_insight.protocol import SpanRecord
from rl_insight.server.runstore import queries as q
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.spans import timeline
from rl_insight.server.runstore.writer import RunStoreWriter

S = 10**9
HOUR = 3600 * S


def build(path: Path, lanes: int, per_lane: int) -> tuple[float, float]:
    """1M spans over one hour: each lane alternates states of ~1.5-3 s with short gaps, like RL phases."""
    w = RunStoreWriter(path, flush_interval_s=0.05)
    names = ["vllm_generate", "update_weights"]
    t0 = time.perf_counter()
    base = time.time_ns() - 2 * HOUR  # client timestamps in the recent past, as in a real run
    step = HOUR // per_lane
    for lane in range(lanes):
        prefix = "replica" if lane % 2 else "rank"
        spans = []
        for i in range(per_lane):
            start = base + i * step + (lane * 7919 % 500) * 10**6
            spans.append(
                SpanRecord(
                    f"{lane:04x}{i:06x}",
                    "t",
                    None,
                    names[i % 2] if prefix == "replica" else ("actor_update", "ref_compute_log_prob")[i % 2],
                    f"{prefix}_{lane // 2}",
                    "state",
                    start,
                    start + int(step * 0.8),
                    {"project": "bench", "experiment_name": "spans"},
                )
            )
        w.put_spans([], spans)
    w.flush(600)
    span_rate = lanes * per_lane / (time.perf_counter() - t0)
    rows = [SampleRow("bench", "spans", "critic_score_mean", "gauge", "{}", float(i), time.time() - 2 * 3600 + i * 0.03,
                      (i % 997) / 997) for i in range(100_000)]
    t0 = time.perf_counter()
    w.put_samples(rows)
    w.flush(600)
    sample_rate = len(rows) / (time.perf_counter() - t0)
    w.close()
    return span_rate, sample_rate




def browser_draw(data_dir: Path) -> float:
    from playwright.sync_api import sync_playwright

    port = free_port()
    cfg = data_dir / "server.json"
    cfg.write_text(json.dumps({"host": "127.0.0.1", "port": port, "data_dir": str(data_dir)}))
    proc = subprocess.Popen([sys.executable, "-m", "rl_insight.server", "--config", str(cfg), "--log-level", "warning"])
    try:
        import httpx

        for _ in range(300):
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=shutil.which("chromium"), headless=True,
                                  args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            pg = b.new_page(viewport={"width": 1600, "height": 1000})
            times = []
            for i in range(3):
                pg.goto("about:blank")
                t0 = time.perf_counter()
                pg.goto(f"http://127.0.0.1:{port}/?load={i}#/run/1")  # a fresh document each time
                pg.wait_for_function(
                    "document.querySelector('#timeline') && +document.querySelector('#timeline').dataset.spanCount > 0",
                    timeout=60_000,
                )
                times.append(time.perf_counter() - t0)
            b.close()
        return statistics.median(times)
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lanes", type=int, default=1000)
    ap.add_argument("--spans-per-lane", type=int, default=1000)
    ap.add_argument("--browser", action="store_true")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    d = Path(tempfile.mkdtemp(prefix="rl-store-bench-"))
    path = d / "runstore.sqlite"
    n = args.lanes * args.spans_per_lane
    span_rate, sample_rate = build(path, args.lanes, args.spans_per_lane)
    print(f"  writer: {n:,} spans at {span_rate:,.0f} spans/s; 100,000 samples at {sample_rate:,.0f} samples/s; "
          f"file {path.stat().st_size / 2**20:.0f} MiB")
    r = RunStoreReader(path)
    conn = r.conn()
    lo, hi = conn.execute("SELECT min(start_ns), max(end_ns) FROM spans").fetchone()
    res = (hi - lo) // 1500
    t, out = timed(lambda: timeline.spans_window(
        conn, 1, from_ns=lo, to_ns=hi, resolution_ns=res, limit=2_000_000), runs=3)
    print(f"  timeline, whole hour, all {args.lanes} lanes, resolution {res / S:.2f}s (1500 px): {t * 1000:.0f} ms, "
          f"{len(out['spans']):,} entries")
    t, lanes = timed(lambda: q.lanes(conn, 1), runs=3)
    print(f"  lane names ({len(lanes)} lanes, loose index scan): {t * 1000:.0f} ms")
    t, _ = timed(lambda: q.lanes(conn, 1, counts=True), runs=3)
    print(f"  lane list with span counts (full scan): {t * 1000:.0f} ms")
    page = [x["lane"] for x in lanes[:64]]
    t, out = timed(lambda: timeline.spans_window(
        conn, 1, from_ns=lo, to_ns=hi, resolution_ns=res, lane_names=page), runs=3)
    print(f"  timeline, whole hour, one UI page of 64 lanes: {t * 1000:.0f} ms, {len(out['spans']):,} entries")
    t, out = timed(lambda: timeline.spans_window(
        conn, 1, from_ns=lo, to_ns=lo + 60 * S, resolution_ns=60 * S // 1500), runs=3)
    print(f"  timeline, one minute zoomed in: {t * 1000:.0f} ms, {len(out['spans']):,} entries")
    t, out = timed(lambda: q.series(conn, 1, "critic_score_mean", points=1000), runs=5)
    print(f"  series, 100,000 steps -> {len(out['series'][0]['points'])} points (min/max): {t * 1000:.0f} ms")
    t, out = timed(lambda: q.series(conn, 1, "critic_score_mean", points=1000, agg="lttb"), runs=3)
    print(f"  series, 100,000 steps -> {len(out['series'][0]['points'])} points (LTTB): {t * 1000:.0f} ms")
    if args.browser:
        print(f"  run page in Chromium, navigation to drawn timeline: {browser_draw(d) * 1000:.0f} ms (median of 3)")


if __name__ == "__main__":
    main()

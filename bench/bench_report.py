"""The HTML report of a 1M-event run: how long headless Chromium takes to open it and draw the timeline.

    python bench/bench_report.py [--events 1000000]

Events: 64 lanes, stages with nested ranges and sub-pixel communication, 20 steps. Reports the file
size, the render time in Python, and navigation → first timeline drawn (median of 3, fresh page).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import machine

from rl_insight.analysis import analyze as an
from rl_insight.analysis.render import html
from rl_insight.analysis.table import Columns, with_depth


def build(n: int):
    c = Columns()
    lanes, steps = 64, 20
    per = n // (lanes * steps)
    ms = 1_000_000
    for lane in range(lanes):
        name = f"actor/rank{lane}"
        for step in range(steps):
            t = step * 1000 * ms
            c.add(
                "torch", "actor", lane, name, "actor_update", "annotation", t + 100 * ms, t + 900 * ms, step, None, "f"
            )
            for k in range(per - 1):
                a = t + 100 * ms + k * (800 * ms // per)
                c.add("torch", "actor", lane, name, "all_reduce", "communication", a, a + 200_000, step, None, "f")
    return with_depth(c.frame())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    df = build(args.events)
    d = Path(tempfile.mkdtemp(prefix="rl-report-"))
    t0 = time.perf_counter()
    out = html.render(df, d / "report.html", "bench", result=an.summarize(df))
    print(f"  {len(df):,} events: rendered in {time.perf_counter() - t0:.1f} s, {out.stat().st_size / 2**20:.1f} MiB")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=shutil.which("chromium"), headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        pg = b.new_page(viewport={"width": 1600, "height": 1000})
        times = []
        for _ in range(3):
            pg.goto("about:blank")
            t = time.perf_counter()
            pg.goto(out.as_uri())
            pg.wait_for_function("window.timeline && window.timeline.rects.length > 0", timeout=120_000)
            times.append(time.perf_counter() - t)
        b.close()
    print(f"  open and draw in headless Chromium: {statistics.median(times):.2f} s (median of 3)")
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()

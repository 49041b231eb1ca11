"""The run page through HTTP, as the browser asks (issue 27): the 64x64 soak of bench_scale.py in a run store, a
real ingest server on it, and the requests the page makes — the timeline's first load of a 64-lane page, the
insight cards, the step table, the header, one chart — timed end to end (request, query, JSON encoding, transfer).

    python bench/bench_run_page_http.py [--steps 600] [--rounds 5]

The timeline's first load is timed two ways, interleaved in one run: as the page asked before (the whole run at
full resolution, then again merged to the width once the answer proved too big) and as it asks now (`px=` the
view's width: the server merges to about one item per pixel per lane in one answer). Medians of --rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import IngestServer, machine
from bench_scale import build, summarize_steps

from rl_insight.server.runstore.reader import RunStoreReader

WIDTH_PX = 1500 - 120  # a 1,500 px timeline less its lane-name gutter


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    d = tempfile.mkdtemp(prefix="rl-page-bench-")
    path = Path(d) / "runstore.sqlite"
    n_spans, n_samples = build(path, args.steps, 64, 64, 0.5)
    summarize_steps(path, RunStoreReader(path).conn())
    print(f"  store: {n_spans:,} spans on 128 lanes, {n_samples:,} samples, {path.stat().st_size / 2**20:.0f} MiB")
    srv = IngestServer(data_dir=d)
    try:
        with httpx.Client(base_url=srv.url, timeout=120) as c:
            base = "/api/v1/runs/1"
            lanes = [x["lane"] for x in c.get(f"{base}/lanes").json()["lanes"]][:64]
            page = ",".join(lanes)

            def timeline_before() -> tuple[int, int]:
                first = c.get(f"{base}/spans", params={"resolution_ns": 0, "lanes": page}).json()
                size, items = 0, len(first["spans"])
                if items > 20_000:  # what timeline.js did then: ask again, merged to the view's width
                    res = (first["to_ns"] - first["from_ns"]) // WIDTH_PX
                    r = c.get(f"{base}/spans", params={"resolution_ns": res, "lanes": page, "from_ns": first["from_ns"],
                                                       "to_ns": first["to_ns"]})
                    size, items = len(r.content), len(r.json()["spans"])
                return size, items

            def timeline_now() -> tuple[int, int]:
                r = c.get(f"{base}/spans", params={"px": WIDTH_PX, "lanes": page})
                return len(r.content), len(r.json()["spans"])

            requests = {
                "timeline first load, as before (whole run, then merged)": timeline_before,
                "timeline first load, now (px=)": timeline_now,
                "insight cards (insights?window_s=300)": lambda: _get(c, f"{base}/insights", window_s=300),
                "step table (insights, whole run, 1,000 steps)": lambda: _get(
                    c, f"{base}/insights", window_s=2592000, max_steps=1000),
                "header (runs/1)": lambda: _get(c, base, config="false"),
                "one chart (series, 800 points)": lambda: _get(c, f"{base}/series", name="metric_00", x="step",
                                                               points=800),
            }
            times: dict[str, list[float]] = {k: [] for k in requests}
            sizes: dict[str, tuple[int, int]] = {}
            for _ in range(args.rounds):  # interleaved: every request once per round
                for label, fn in requests.items():
                    t0 = time.perf_counter()
                    sizes[label] = fn()
                    times[label].append(time.perf_counter() - t0)
            for label, ts in times.items():
                size, items = sizes[label]
                print(f"  {label}: {statistics.median(ts) * 1000:.0f} ms (median of {len(ts)}), "
                      + (f"{items:,} items, " if items else "") + f"{size / 1024:.0f} KiB")
    finally:
        srv.stop()


def _get(c: httpx.Client, path: str, **params: object) -> tuple[int, int]:
    r = c.get(path, params=params)
    r.raise_for_status()
    return len(r.content), 0


if __name__ == "__main__":
    main()

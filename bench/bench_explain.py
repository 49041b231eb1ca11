"""Explaining steps and runs through HTTP at the 64x64 soak (issue 25): one step's critical path (from its spans),
and over all 600 steps the what-if savings and a run diff (from the stored per-step rows, no span rescan).

    python bench/bench_explain.py [--steps 600] [--rounds 5]

Builds the soak of bench_scale.py in a run store with its per-step statistics (which now include each step's
critical path and what-if rows; the time that takes a step is printed), starts a real ingest server on it and
times the requests end to end. Medians of --rounds, interleaved.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import IngestServer, machine, time_requests
from bench_scale import build, summarize_steps

from rl_insight.server.runstore.reader import RunStoreReader


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    d = tempfile.mkdtemp(prefix="rl-explain-bench-")
    path = Path(d) / "runstore.sqlite"
    n_spans, _ = build(path, args.steps, 64, 64, 0.5)
    t0 = time.perf_counter()
    todo = summarize_steps(path, RunStoreReader(path).conn())
    took = time.perf_counter() - t0
    print(f"  store: {n_spans:,} spans on 128 lanes; per-step statistics with the critical path: "
          f"{took / max(1, len(todo)) * 1000:.1f} ms a step (once, in the background)")
    srv = IngestServer(data_dir=d)
    half = args.steps // 2
    try:
        with httpx.Client(base_url=srv.url, timeout=120) as c:
            requests = {
                "one step's critical path (critical-path?step=N, from its spans)":
                    ("/api/v1/runs/1/critical-path", {"step": half}),
                f"what-if over {args.steps} steps (explain)": ("/api/v1/runs/1/explain", {}),
                f"run diff, {args.steps} aligned steps (runs/diff?a=1&b=1)": ("/api/v1/runs/diff", {"a": 1, "b": 1}),
                f"window diff, {half} + {half} steps (a_steps / b_steps)": ("/api/v1/runs/diff", {
                    "a": 1, "b": 1, "a_steps": f"1-{half}", "b_steps": f"{half + 1}-{args.steps}"}),
            }
            def no_pending(label: str, body: dict) -> None:
                pending = body.get("pending_steps")
                assert pending in (None, 0, {"a": 0, "b": 0}), f"{label}: steps without stored rows: {pending}"

            time_requests(c, requests, args.rounds, no_pending)
    finally:
        srv.stop()


if __name__ == "__main__":
    main()

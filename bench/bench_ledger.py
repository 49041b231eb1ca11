"""The goodput ledger at the 64x64 soak (issue 53): what keeping it costs the per-step statistics, and the run page's
ledger answers through HTTP.

    python bench/bench_ledger.py [--steps 600] [--rounds 5] [--sample 60]

Builds the soak of bench_scale.py (64 trainer ranks, 64 replicas), then times the per-step statistics of `--sample`
steps with the ledger's rows and without them (step_stats.ledger_rows replaced by nothing), interleaved step by step,
and reports the ratio. Then summarizes every step, starts a real ingest server on the store and times the requests
the run page makes for the ledger (the whole run's ledger, a 100-step window, the step table's insights beside it),
medians of --rounds, interleaved.
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
from _util import IngestServer, machine, time_requests
from bench_scale import build, summarize_steps

from rl_insight.semantics import insights as ins
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.steps import step_stats
from rl_insight.server.runstore.steps.run_insights import metric_samples


def cost_of_keeping(conn, sample: int) -> tuple[float, float]:
    """Median seconds a step for the per-step statistics with and without the ledger's rows (interleaved)."""
    windows = ins.step_windows(metric_samples(conn, 1, "training/global_step"))[1:sample + 1]
    keep = step_stats.ledger_rows
    with_ledger, without = [], []
    for w in windows:
        for on in (True, False):
            step_stats.ledger_rows = keep if on else (lambda *a, **k: [])  # type: ignore[assignment]
            t = time.perf_counter()
            step_stats.compute_steps(conn, 1, [w], [], time.time_ns())
            (with_ledger if on else without).append(time.perf_counter() - t)
    step_stats.ledger_rows = keep
    return statistics.median(with_ledger), statistics.median(without)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sample", type=int, default=60)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    d = tempfile.mkdtemp(prefix="rl-ledger-bench-")
    path = Path(d) / "runstore.sqlite"
    n_spans, _ = build(path, args.steps, 64, 64, 0.5)
    conn = RunStoreReader(path).conn()
    on, off = cost_of_keeping(conn, args.sample)
    print(f"  store: {n_spans:,} spans on 128 lanes")
    print(f"  per-step statistics, median of {args.sample} steps: {on * 1000:.1f} ms with the ledger, "
          f"{off * 1000:.1f} ms without ({on / off:.2f}x)")
    summarize_steps(path, conn)
    srv = IngestServer(data_dir=d)
    try:
        with httpx.Client(base_url=srv.url, timeout=120) as c:
            requests = {
                f"run ledger, {args.steps} steps (ledger)": ("/api/v1/runs/1/ledger", {}),
                "ledger, 100-step window (ledger?steps=200-299)": ("/api/v1/runs/1/ledger", {"steps": "200-299"}),
                "step table beside it (insights, whole run)": ("/api/v1/runs/1/insights",
                                                               {"window_s": 2592000, "max_steps": 1000}),
            }
            def summarized(label: str, body: dict) -> None:
                assert not body.get("pending"), f"{label}: steps not summarized: {len(body['pending'])}"

            time_requests(c, requests, args.rounds, summarized)
    finally:
        srv.stop()


if __name__ == "__main__":
    main()

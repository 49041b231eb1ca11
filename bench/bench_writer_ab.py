"""The run store writer, this checkout against another (a baseline), side by side: each round runs one process per
checkout in turn, on a fresh store each, so both see the same machine noise; the ratio of medians is the answer.

    git worktree add /tmp/before HEAD~1
    python bench/bench_writer_ab.py --baseline /tmp/before --kind samples --store postgresql --rounds 5

--kind samples: 64 clients x 20 series, one sample each per step, handed over a step at a time (what a job's
clients send), 1,000 steps; --kind span-ends: 40,000 spans written open, then their ends (the timeline's lanes).
--store postgresql starts a throwaway postgresql-15 cluster (tests/pg_cluster.py) with a fresh database a process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _util import machine

ROOT = Path(__file__).resolve().parents[1]

# one measurement, run in a child process whose PYTHONPATH is the checkout under test; prints items per second
CHILD = r'''
import sys, tempfile, time, json
from pathlib import Path
from rl_insight.protocol import SpanRecord
from rl_insight.server.runstore.writer import RunStoreWriter
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.backend.location import parse_store, sqlite_location
kind, url = sys.argv[1], sys.argv[2]
loc = sqlite_location(Path(tempfile.mkdtemp()) / "rs.sqlite") if url == "sqlite" else parse_store(url, Path("."))
w = RunStoreWriter(loc, flush_interval_s=0.01)
if kind == "samples":
    t0, steps = time.time() - 3600, 1000
    start = time.perf_counter()
    for step in range(steps):
        w.put_samples([SampleRow("p", "e", f"metric_{m}", "gauge", json.dumps({"rank": str(c)}), float(step),
                                 t0 + step + c * 1e-3, float(m * step)) for c in range(64) for m in range(20)])
    assert w.flush(300)
    n = steps * 64 * 20
else:
    n, batch, t0 = 40000, 2000, time.time_ns() - 3600 * 10**9
    attrs = {"project": "p", "experiment_name": "e"}
    mk = lambda i, end: SpanRecord(f"s{i}", "t", None, "gen", f"lane{i % 64}", "state", t0 + i * 10**7, end, attrs)
    for a in range(0, n, batch):
        w.put_spans([mk(i, None) for i in range(a, a + batch)], [])
    assert w.flush(120)
    start = time.perf_counter()
    for a in range(0, n, batch):
        w.put_spans([], [mk(i, t0 + i * 10**7 + 5 * 10**6) for i in range(a, a + batch)])
    assert w.flush(300)
assert w.stats.dropped == 0, w.stats
print(json.dumps(n / (time.perf_counter() - start)))
w.close()
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="the other checkout (a git worktree)")
    ap.add_argument("--kind", choices=("samples", "span-ends"), default="samples")
    ap.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    cluster = None
    env = dict(os.environ)
    if args.store == "postgresql":
        sys.path.insert(0, str(ROOT))
        from tests.pg_cluster import PASSWORD, PostgresCluster

        cluster = PostgresCluster()
        cluster.wait_ready()
        env["RL_INSIGHT_STORE_PASSWORD"] = PASSWORD
    rates: dict[str, list[float]] = {"baseline": [], "this": []}
    try:
        for _ in range(args.rounds):
            for name, path in (("baseline", args.baseline.resolve()), ("this", ROOT)):
                url = "sqlite" if cluster is None else cluster.url(cluster.create_database("ab"))
                out = subprocess.run([sys.executable, "-c", CHILD, args.kind, url], capture_output=True, text=True,
                                     env={**env, "PYTHONPATH": str(path)}, cwd=path, timeout=900)
                if out.returncode != 0:
                    raise SystemExit(f"{name} failed:\n{out.stderr[-3000:]}")
                rates[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        if cluster is not None:
            cluster.stop()
    for name, values in rates.items():
        print(f"  {name:8} {args.kind} per s: {[round(v) for v in values]} median {statistics.median(values):,.0f}")
    print(f"  this / baseline: {statistics.median(rates['this']) / statistics.median(rates['baseline']):.3f}")


if __name__ == "__main__":
    main()

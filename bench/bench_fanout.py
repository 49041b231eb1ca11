"""Offline analysis of many rank files: one process vs --workers vs a local Ray cluster (same machine).

    python bench/bench_fanout.py [--files 64] [--events 100000] [--ray]

64 synthetic torch traces (the real key set, `bench_analysis.synth`) named as verl HEAD names them,
read by `rl_insight.analysis.load` in a fresh process each time: workers=1, workers=<cores>, and with
--ray on a `ray start --head` cluster of this machine. Interleaved, median of 3.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import machine
from bench_analysis import synth

CODE = """
import sys, time, json
from pathlib import Path
from rl_insight.analysis.load import load
t = time.perf_counter()
kw = json.loads(sys.argv[2])
d = load([Path(sys.argv[1])], **kw)
print(json.dumps({"s": time.perf_counter() - t, "events": len(d.events), "errors": len(d.report.errors)}))
"""


def once(folder: Path, kw: dict) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CODE, str(folder), json.dumps(kw)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--ray", action="store_true")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    print(f"machine: {machine()}")
    d = Path(tempfile.mkdtemp(prefix="rl-fanout-"))
    first = d / "seed.json.gz"
    synth(first, args.events)
    for r in range(args.files):
        shutil.copy(
            first, d / f"actor-rollout-ref_e2e_step1_rank{r}-of-{args.files}_pid{1000 + r}_20261130120000123.json.gz"
        )
    first.unlink()
    size = sum(f.stat().st_size for f in d.iterdir()) / 2**20
    print(f"  {args.files} files x {args.events:,} events ({size:.0f} MiB gzipped)")
    modes = {"one process": {"workers": 1}, f"--workers {cores}": {"workers": cores}}
    if args.ray:
        subprocess.run(
            ["ray", "start", "--head", "--include-dashboard=false", "--port", "0"],
            check=True,
            capture_output=True,
            env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
        )
        modes["--ray auto"] = {"ray_address": "auto"}
    times: dict[str, list[float]] = {m: [] for m in modes}
    try:
        for _ in range(3):  # interleaved
            for m, kw in modes.items():
                r = once(d, kw)
                assert r["errors"] == 0
                times[m].append(r["s"])
    finally:
        if args.ray:
            subprocess.run(["ray", "stop", "--force"], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)
    base = statistics.median(times["one process"])
    for m, ts in times.items():
        t = statistics.median(ts)
        print(f"  {m}: {t:.2f} s ({base / t:.2f}x one process)")


if __name__ == "__main__":
    main()

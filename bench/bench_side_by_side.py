"""This tree against a baseline tree (a worktree of an earlier commit), interleaved, on the same machine:
the client's hot path into a real ingest server and into a null sink, and the ingest server's accepted rate.

    git worktree add /tmp/baseline <commit>
    python bench/bench_side_by_side.py --baseline /tmp/baseline [--rounds 5] [--seconds 5] [--only client|server]

Each round runs the baseline, then this tree (alternating which goes first), each in a fresh interpreter
with PYTHONPATH set to its tree (its client, its server). Reports the median of the rounds and the ratio
this / baseline: the machine is shared and noisy, so only side-by-side ratios mean anything.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import machine

HERE = Path(__file__).resolve().parents[1]

CLIENT = r"""
import json, sys
sys.path.insert(0, "bench")
from _util import IngestServer, NullSink
from bench_client import hot_path
server, sink = IngestServer(), NullSink()
try:
    out = {"real": hot_path(server.url, "reachable"), "null": hot_path(sink.url, "reachable (null sink)")}
finally:
    server.stop()
print("RESULT " + json.dumps(out))
"""


def run(tree: Path, args: list[str], timeout: float = 600) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    r = subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(args)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout


def client_round(tree: Path) -> dict[str, float]:
    out = run(tree, ["-c", CLIENT])
    got = json.loads(out.split("RESULT ", 1)[1])
    return {
        "trace_state, real server": got["real"]["trace_state"],
        "trace_state, null sink": got["null"]["trace_state"],
        "metric_gauge, real server": got["real"]["metric_gauge"],
        # (the same run's prometheus_client Gauge.set: the yardstick; a tree whose bench lacks it reports none)
        **({"prometheus_client Gauge.set": got["real"]["prometheus_client Gauge.set"]}
           if "prometheus_client Gauge.set" in got["real"] else {}),
    }


def server_round(tree: Path, seconds: float) -> dict[str, float]:
    out = run(tree, [str(HERE / "bench" / "bench_server.py"), "--seconds", str(seconds)])
    rates = dict(re.findall(r"\[run store on *\] (metric samples|finished spans): ([\d,]+)/s", out))
    return {f"ingest {k}/s (store on)": float(v.replace(",", "")) for k, v in rates.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--only", choices=("client", "server"), help="one half only (more rounds in the same time)")
    a = ap.parse_args()
    print(f"machine: {machine()}")
    trees = {"baseline": a.baseline.resolve(), "this": HERE}
    results: dict[str, dict[str, list[float]]] = {"baseline": {}, "this": {}}
    for i in range(a.rounds):
        order = ["baseline", "this"] if i % 2 == 0 else ["this", "baseline"]
        for name in order:
            got = client_round(trees[name]) if a.only != "server" else {}
            if a.only != "client":
                got.update(server_round(trees[name], a.seconds))
            for k, v in got.items():
                results[name].setdefault(k, []).append(v)
            print(f"round {i + 1} {name}: " + ", ".join(f"{k} {v:,.2f}" for k, v in got.items()), flush=True)
    print("\nmedian of rounds      baseline        this   this/baseline")
    for k in results["this"]:
        t = statistics.median(results["this"][k])
        if k not in results["baseline"]:
            print(f"{k:34s} {'–':>12s} {t:12,.2f}")
            continue
        b = statistics.median(results["baseline"][k])
        print(f"{k:34s} {b:12,.2f} {t:12,.2f}   {t / b:6.3f}")
    ref = results["this"].get("prometheus_client Gauge.set")
    if ref:  # this tree's hot path against the yardstick, the medians of per-round ratios
        for k in ("metric_gauge, real server", "trace_state, real server"):
            ratios = [x / r for x, r in zip(results["this"][k], ref)]
            print(f"this tree, {k} / Gauge.set of the same run: {statistics.median(ratios):.2f}×")


if __name__ == "__main__":
    main()

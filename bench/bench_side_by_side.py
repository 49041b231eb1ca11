"""This tree against a baseline tree (a worktree of an earlier commit), interleaved, on the same machine:
the client's hot path into a real ingest server, into a null sink and with the sender held (the training thread's
own work alone), and the ingest server's accepted rate.

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

# The hot path alone: the sender thread held in its first send (a transport that never answers, a queue that holds
# every call), so the numbers are the training thread's own work, without the batching and encoding that otherwise
# take the GIL from it. The same code for both trees: the public API and init's `transport`.
HELD = r"""
import json, os, statistics, sys, threading
os.environ["RL_INSIGHT_SERVER_URL"] = "http://127.0.0.1:9"
os.environ["RL_INSIGHT_QUEUE_SIZE"] = "4000000"
import rl_insight
from prometheus_client import CollectorRegistry, Gauge
held = threading.Event()
class Held:
    def post(self, route, body, headers):
        held.wait()
    def close(self):
        pass
rl_insight.init(project="bench", experiment_name="held", transport=Held)
ref = Gauge("bench_reference", "", registry=CollectorRegistry())
sys.path.insert(0, "bench")
from bench_client import per_call_us  # (each tree's own: both have it)
def per_call(fn):
    return per_call_us(fn, rounds=40, calls=1000)
def gauge():
    rl_insight.metric_gauge("actor_pg_loss", 0.5)
def state():
    with rl_insight.trace_state("actor_update", state_lane_id="rank_0"):
        pass
got = {"metric_gauge": [], "trace_state": [], "set": []}
for _ in range(3):
    got["metric_gauge"].append(per_call(gauge)); got["trace_state"].append(per_call(state))
    got["set"].append(per_call(lambda: ref.set(0.5)))
print("RESULT " + json.dumps({k: statistics.median(v) for k, v in got.items()}))
os._exit(0)
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
        **held_round(tree),
    }


def held_round(tree: Path) -> dict[str, float]:
    got = json.loads(run(tree, ["-c", HELD]).split("RESULT ", 1)[1])
    return {"metric_gauge, sender held": got["metric_gauge"], "trace_state, sender held": got["trace_state"],
            "Gauge.set, held run": got["set"]}


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
    for name in ("baseline", "this"):  # the hot path alone against the yardstick, each tree
        held = results[name].get("Gauge.set, held run")
        if held:
            for k in ("metric_gauge, sender held", "trace_state, sender held"):
                ratios = [x / r for x, r in zip(results[name][k], held)]
                print(f"{name}, {k} / Gauge.set of the same run: {statistics.median(ratios):.2f}×")


if __name__ == "__main__":
    main()

"""Tail latency inside a training loop: does the client's background thread stall the loop?

A GIL-bound loop of ~1 ms items (vLLM's scheduler and verl's driver are such loops) emits per item
2 gauges + 1 `trace_state` (~3k events/s) to a live ingest server running in another process.
Variants, each in a fresh process, interleaved round by round so machine noise hits all alike:

* bare: the loop alone;
* rl_insight: this client, sending to the server;
* prometheus_client: the same 2 gauges + a histogram observation, exposed by
  `start_http_server` and scraped every second by another process (the usual way to export from a loop).

Reported per variant: p50, p99 and max item time over all rounds; goal (issue 9): rl_insight's p99
<= 1.3x the bare loop's and its worst item <= 2x prometheus_client's worst.

    python bench/bench_training_stall.py [--rounds 5] [--items 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spin(n: int) -> int:
    acc = 0
    for i in range(n):
        acc += i * i % 7
    return acc


def calibrate(target_s: float = 0.001) -> int:
    n = 10_000
    while True:
        t0 = time.perf_counter()
        spin(n)
        dt = time.perf_counter() - t0
        if dt > 0.05:
            return max(1, int(n * target_s / dt))
        n *= 2


def child(variant: str, items: int, n: int, url: str) -> None:
    """One round in a fresh process: print the item times (ms) as JSON."""
    times: list[float] = []
    if variant in ("rl_insight", "rl_insight_null"):
        import rl_insight

        os.environ["RL_INSIGHT_SERVER_URL"] = url
        transport = None
        if variant == "rl_insight_null":  # the same client, its batches discarded: isolates the server's CPU share
            from rl_insight.client.transport import Response

            class NullTransport:
                def post(self, route: str, body: bytes, headers: dict) -> Response:
                    return Response(200, {"accepted": 0, "rejected": 0, "boot_id": "null", "protocols": [1, 2]})

                def close(self) -> None:
                    pass

            transport = NullTransport
        rl_insight.init(project="bench", experiment_name="stall", transport=transport)

        def emit(i: int, dt: float) -> Any:
            rl_insight.metric_gauge("loop/item_ms", dt)
            rl_insight.metric_gauge("training/global_step", i)
            return rl_insight.trace_state("item", state_lane_id="loop")
    elif variant == "prometheus_client":
        from prometheus_client import Gauge, Histogram, start_http_server

        port = free_port()
        start_http_server(port, addr="127.0.0.1")
        g1, g2 = Gauge("loop_item_ms", "item"), Gauge("loop_step", "step")
        h = Histogram("loop_item_seconds", "item")
        scraper = subprocess.Popen([sys.executable, "-c", _SCRAPER, f"http://127.0.0.1:{port}/metrics"])

        class _Obs:
            def __enter__(self) -> None:
                self.t0 = time.perf_counter()

            def __exit__(self, *a: object) -> None:
                h.observe(time.perf_counter() - self.t0)

        def emit(i: int, dt: float) -> Any:
            g1.set(dt)
            g2.set(i)
            return _Obs()
    else:
        import contextlib

        def emit(i: int, dt: float) -> Any:
            return contextlib.nullcontext()

    dt = 0.0
    for i in range(items + 200):
        t0 = time.perf_counter()
        with emit(i, dt):
            spin(n)
        dt = (time.perf_counter() - t0) * 1000
        if i >= 200:  # warm-up excluded
            times.append(dt)
    if variant in ("rl_insight", "rl_insight_null"):
        import rl_insight

        ok = rl_insight.flush(10)
        stats = rl_insight.stats()
        rl_insight.finish(5)
        print(json.dumps({"times": times, "flush_ok": ok, "dropped": stats["dropped"], "sent": stats["sent"]}))
        return
    if variant == "prometheus_client":
        scraper.terminate()
    print(json.dumps({"times": times}))


_SCRAPER = """
import sys, time, urllib.request
url = sys.argv[1]
while True:
    try:
        urllib.request.urlopen(url, timeout=2).read()
    except Exception:
        pass
    time.sleep(1.0)
"""

_SERVER = """
import sys, uvicorn
from rl_insight.server.app import create_app
from rl_insight.server.config import ServerConfig
cfg = ServerConfig(host="127.0.0.1", port=int(sys.argv[1]), data_dir=sys.argv[2])
uvicorn.run(create_app(cfg), host="127.0.0.1", port=cfg.port, log_level="warning")
"""


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--items", type=int, default=3000)
    ap.add_argument("--with-null", action="store_true", help="also run the client with a transport that discards "
                    "batches (shows how much of the tail is the server's CPU on the same machine)")
    ap.add_argument("--child", nargs=4, metavar=("VARIANT", "ITEMS", "N", "URL"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], int(a.child[1]), int(a.child[2]), a.child[3])
        return
    port = free_port()
    data = tempfile.mkdtemp(prefix="rl-insight-bench-")
    server = subprocess.Popen([sys.executable, "-c", _SERVER, str(port), data], cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    import httpx

    for _ in range(100):
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    n = calibrate()
    variants = ["bare", "rl_insight", "prometheus_client"] + (["rl_insight_null"] if a.with_null else [])
    results: dict[str, list[float]] = {v: [] for v in variants}
    notes: dict[str, object] = {}
    try:
        for r in range(a.rounds):
            for v in variants if r % 2 == 0 else list(reversed(variants)):
                out = subprocess.run([sys.executable, __file__, "--child", v, str(a.items), str(n), url], cwd=ROOT,
                                     capture_output=True, text=True, check=True)
                res = json.loads(out.stdout.strip().splitlines()[-1])
                results[v] += res["times"]
                if v.startswith("rl_insight"):
                    notes[f"{v} round {r}"] = {k: res[k] for k in ("flush_ok", "dropped", "sent")}
    finally:
        server.terminate()
        server.wait(10)
    mean_ms = sum(results["rl_insight"]) / len(results["rl_insight"])
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}; {a.rounds} rounds x {a.items} items, "
          f"~1 ms GIL-bound work per item (spin {n}); per item 2 gauges + 1 state = 4 events "
          f"(state start + end): {4000 / mean_ms:,.0f} events/s")
    print(f"{'variant':<18} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for v in variants:
        xs = results[v]
        print(f"{v:<18} {pct(xs, 50):8.3f} {pct(xs, 99):8.3f} {max(xs):8.3f}")
    p99_ratio = pct(results["rl_insight"], 99) / pct(results["bare"], 99)
    max_ratio = max(results["rl_insight"]) / max(results["prometheus_client"])
    print(f"rl_insight p99 / bare p99 = {p99_ratio:.2f} (goal <= 1.3); "
          f"rl_insight max / prometheus_client max = {max_ratio:.2f} (goal <= 2.0)")
    print("client delivery:", json.dumps(notes))


if __name__ == "__main__":
    main()

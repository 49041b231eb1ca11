"""Client benchmarks: hot-path cost, delivery throughput, memory bound, import cost.

    python bench/bench_client.py [--quick]

Each hot-path number is the median over 200 rounds of 1,000 calls (per-call time = round time / 1,000).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import IngestServer, NullSink, free_port, machine


def per_call_us(fn, rounds: int = 200, calls: int = 1000) -> float:
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter_ns() - t0) / calls / 1000)
    return statistics.median(samples)


def hot_path(url: str, label: str) -> dict[str, float]:
    import rl_insight

    os.environ["RL_INSIGHT_SERVER_URL"] = url
    rl_insight.init(project="bench", experiment_name="hot")
    def gauge() -> None:
        rl_insight.metric_gauge("actor_pg_loss", 0.5)


    def state() -> None:
        with rl_insight.trace_state("actor_update", state_lane_id="rank_0"):
            pass

    def count() -> None:
        rl_insight.metric_count("tokens", 1.0)

    try:  # the yardstick a training loop already pays: prometheus_client's Gauge.set, measured in the same run
        from prometheus_client import CollectorRegistry, Gauge

        reference = Gauge("bench_reference", "", registry=CollectorRegistry())
        pset: Callable[[], None] | None = lambda: reference.set(0.5)  # noqa: E731
    except ImportError:
        pset = None
    out = {"metric_gauge": per_call_us(gauge), "trace_state": per_call_us(state), "metric_count": per_call_us(count)}
    if pset is not None:
        out["prometheus_client Gauge.set"] = per_call_us(pset)
    rl_insight.finish(timeout=5 if "reachable" in label else 0)
    print(f"  hot path, server {label}: " + ", ".join(f"{k} {v:.2f} µs" for k, v in out.items()))
    if pset is not None:
        ref = out["prometheus_client Gauge.set"]
        print(f"    against Gauge.set in the same run: metric_gauge {out['metric_gauge'] / ref:.2f}×, trace_state "
              f"{out['trace_state'] / ref:.1f}×")
    return out


def throughput(url: str, label: str, n: int) -> float:
    """Events per second from first call until the server has acknowledged everything."""
    import rl_insight

    os.environ["RL_INSIGHT_SERVER_URL"] = url
    rl_insight.init(config={"client": {"queue_size": n + 10, "batch_size": 10_000}})
    t0 = time.perf_counter()
    for i in range(n):
        rl_insight.metric_gauge("reward", i)
    ok = rl_insight.flush(120)
    dt = time.perf_counter() - t0
    st = rl_insight.stats()
    rl_insight.finish(timeout=5)
    assert ok and not st["dropped"], st
    rate = n / dt
    print(f"  delivery to {label}: {n:,} gauge events in {dt:.2f}s = {rate:,.0f} events/s")
    return rate


def memory_bound(n: int) -> None:
    import rl_insight

    os.environ["RL_INSIGHT_SERVER_URL"] = f"http://127.0.0.1:{free_port()}"  # unreachable
    tracemalloc.start()
    rl_insight.init(config={"client": {"queue_size": 100_000}})
    base = tracemalloc.get_traced_memory()[0]
    peaks = []
    for chunk in range(4):
        for i in range(n // 4):
            rl_insight.metric_gauge("g", float(i), rank=str(i % 8))
        peaks.append((tracemalloc.get_traced_memory()[0] - base) / 2**20)
    st = rl_insight.stats()
    rl_insight.finish(timeout=0)
    tracemalloc.stop()
    print(
        f"  memory with server down, queue 100k: after each {n // 4:,} calls {', '.join(f'{p:.1f}' for p in peaks)} "
        "MiB; "
        f"dropped {st['dropped'].get('queue_full', 0):,} (queue_full)"
    )


def import_cost(runs: int) -> None:
    def median_ms(code: str) -> float:
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            times.append((time.perf_counter() - t0) * 1000)
        return statistics.median(times)

    bare, with_import = median_ms("pass"), median_ms("import rl_insight")
    print(f"  interpreter start: bare {bare:.1f} ms, with `import rl_insight` {with_import:.1f} ms "
          f"(+{with_import - bare:.1f} ms, median of {runs})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n = 200_000 if args.quick else 1_000_000
    print(f"machine: {machine()}")
    import_cost(10 if args.quick else 30)
    server = IngestServer()
    try:
        hot_path(server.url, "reachable")
        hot_path(f"http://127.0.0.1:{free_port()}", "unreachable")
        sink = NullSink()
        throughput(sink.url, "a null HTTP sink (client only)", n)
        throughput(server.url, "the real ingest server", n // 2)
    finally:
        server.stop()
    memory_bound(n)


if __name__ == "__main__":
    main()

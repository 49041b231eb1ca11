"""Ingest server throughput: pre-built gzip batches posted over keep-alive connections by sender threads.

    python bench/bench_server.py [--seconds 10] [--postgres]

Reports samples/s and spans/s accepted by one `python -m rl_insight.server` process, and with the run store
on also the rate *stored*: accepted items over the load time plus the time the writer still needed after it
(since issue 21 an answer comes after the commit, so the two agree; before, the store could lag behind). Senders run in
this process (2 threads); on a 2-core machine they compete with the server for CPU, so the numbers
are a lower bound of what the server does on a host of its own.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import IngestServer, machine


def metric_batch(n: int, client: str) -> bytes:
    series = [{"k": "g", "n": f"actor/metric_{i}", "l": {"project": "p", "experiment_name": "e"}} for i in range(50)]
    series += [{"k": "c", "n": "tokens", "l": {"replica": str(i)}} for i in range(10)]
    now = time.time()
    samples = [[i % 60, now, i // 60, float(i)] for i in range(n)]
    body = {"v": 1, "client": {"id": client, "pid": 1, "host": "h"}, "series": series, "samples": samples}
    return gzip.compress(json.dumps(body).encode(), 1)


def span_batch(n: int, client: str) -> bytes:
    t = time.time_ns()
    spans = [{"id": f"{i:016x}", "trace_id": f"{i:032x}", "parent_id": None, "name": "vllm_generate",
              "lane": f"replica_{i % 8}", "kind": "state", "start_ns": t + i, "end_ns": t + i + 1000,
              "attributes": {"process_id": "1", "project": "p", "experiment_name": "e", "state_name": "vllm_generate",
                             "state_lane_id": f"replica_{i % 8}", "monitor.trace_segment": "state_interval"}}
             for i in range(n)]
    return gzip.compress(json.dumps({"v": 1, "client": {"id": client}, "spans": spans}).encode(), 1)


def run(url: str | list[str], body: bytes, per_batch: int, seconds: float, threads: int) -> tuple[float, float, float]:
    """(items/s, p50 and p99 request latency in ms); several URLs: the sender threads take turns."""
    urls = [url] if isinstance(url, str) else url
    done = [0] * threads
    latencies: list[float] = []
    stop = time.monotonic() + seconds

    def worker(k: int) -> None:
        with httpx.Client(timeout=30, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}) as c:
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                r = c.post(urls[k % len(urls)] + "/api/v1/ingest", content=body)
                latencies.append(1000 * (time.perf_counter() - t0))
                assert r.status_code == 200 and r.json()["rejected"] == 0, r.text[:300]
                done[k] += per_batch

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    rate = sum(done) / (time.monotonic() - t0)
    lat = sorted(latencies)
    return rate, lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]


def written(url: str) -> tuple[float, float]:
    """(items the run store has written, items waiting for its writer), from the server's /metrics."""
    total = queue = 0.0
    for ln in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if ln.startswith("rl_insight_server_store_items_written_total"):
            total += float(ln.rsplit(" ", 1)[1])
        elif ln.startswith("rl_insight_server_store_queue_items "):
            queue = float(ln.rsplit(" ", 1)[1])
    return total, queue


def drain_seconds(url: str) -> float:
    """How long the writer still works after the load stopped: until nothing waits and nothing more is written."""
    t0 = time.monotonic()
    last = -1.0
    while True:
        total, queue = written(url)
        if queue == 0 and total == last:
            return max(0.0, time.monotonic() - t0 - 0.1)  # the last poll only confirmed it
        last = total
        time.sleep(0.1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--with-export", action="store_true", help="also: run store on + live TensorBoard export")
    ap.add_argument("--postgres", action="store_true", help="also: the run store on PostgreSQL (a throwaway "
                                                            "postgresql-15 cluster), through one and two processes")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    configs: list[tuple[str, bool, dict, int]] = [("run store off", False, {}, 1), ("run store on ", True, {}, 1)]
    if args.with_export:
        configs.append(("store + TB   ", True, {"export_tensorboard": "tb"}, 1))
    cluster = None
    if args.postgres:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.pg_cluster import PASSWORD, PostgresCluster

        cluster = PostgresCluster()
        cluster.wait_ready()
        os.environ["RL_INSIGHT_STORE_PASSWORD"] = PASSWORD
        configs += [("postgres, 1  ", True, {"store_url": "new"}, 1), ("postgres, 2  ", True, {"store_url": "new"}, 2)]
    try:
        for label, store, extra, processes in configs:
            if extra.get("store_url") == "new":
                assert cluster is not None
                extra = {**extra, "store_url": cluster.url(cluster.create_database("write"))}
            servers = [IngestServer(store=store, **dict(extra)) for _ in range(processes)]
            try:
                measure(label, [srv.url for srv in servers], store, args)
            finally:
                for srv in servers:
                    srv.stop()
    finally:
        if cluster is not None:
            cluster.stop()


def measure(label: str, urls: list[str], store: bool, args: argparse.Namespace) -> None:
    def stored(rate: float) -> str:
        if not store:
            return ""
        drain = max(drain_seconds(u) for u in urls)
        return f", stored {rate * args.seconds / (args.seconds + drain):,.0f}/s"

    rate, p50, p99 = run(urls, metric_batch(5000, "bench"), 5000, args.seconds, args.threads)
    print(f"  [{label}] metric samples: {rate:,.0f}/s{stored(rate)}, request p50 {p50:.0f} ms p99 {p99:.0f} ms "
          f"(batches of 5,000, {args.threads} sender threads, {len(urls)} process(es))")
    rate, p50, p99 = run(urls, span_batch(2000, "bench"), 2000, args.seconds, args.threads)
    print(f"  [{label}] finished spans: {rate:,.0f}/s{stored(rate)}, request p50 {p50:.0f} ms p99 {p99:.0f} ms "
          f"(batches of 2,000)")
    if store:
        for u in urls:
            stats = httpx.get(u + "/metrics").text
            dropped = [ln for ln in stats.splitlines() if ln.startswith("rl_insight_server_store_items_dropped_total")]
            print(f"  [{label}] run store drops: {dropped or 'none'}")
            exported = [ln for ln in stats.splitlines() if ln.startswith("rl_insight_server_export_points")]
            if exported:
                print(f"  [{label}] export: {exported}")


if __name__ == "__main__":
    main()

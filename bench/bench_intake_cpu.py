"""The ingest path's CPU a batch, this checkout against a baseline checkout, interleaved (issue 24, item 0).

    git worktree add /tmp/before HEAD
    python bench/bench_intake_cpu.py --baseline /tmp/before [--rounds 5] [--clients 1000] [--seconds 10]
    python bench/bench_intake_cpu.py --config '{"insights_interval_s": 3600}'   # this checkout, insight rounds off

Each measurement is a fresh process (PYTHONPATH = the checkout) that builds the server's app as `python -m
rl_insight.server` does (`create_app`, the garbage collector's policy, the lifespan: run store writer process,
insight process) and calls the ASGI app directly, without sockets: `--clients` clients each post one gzip batch a
second (bench_fanin's bodies: 20 samples + 5 finished states), paced at their own phases, every answer waiting for
its commit as over HTTP. After `--warmup` seconds of the same load (clients known, series defined), it reports the
CPU the server's process used a batch (all its threads), its child processes' (run store writer, insight rounds),
and the answers' p50 / p99.

What it leaves out is what both checkouts share: uvicorn's parser and the socket. What it keeps is everything of
ours a batch costs, on every thread and process, so an A/B of a change to the intake path reads ±3-5 % on this
noisy machine where the HTTP benchmark (bench_fanin) reads ±10 %. Rounds alternate which checkout goes first; the
answer is the ratio of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import machine
from bench_fanin import batch

ROOT = Path(__file__).resolve().parents[1]

# one measurement; argv: bodies file, seconds, warmup seconds, clients, ServerConfig fields (JSON), bench dir
CHILD = r'''
import asyncio, json, os, pickle, sys, tempfile, time
from pathlib import Path

bodies_file, seconds, warmup, clients = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
overrides = json.loads(sys.argv[5])
sys.path.insert(0, sys.argv[6])  # this checkout's bench/, for bench_fanin's CPU reading
from bench_fanin import cpu_seconds
rounds = pickle.loads(Path(bodies_file).read_bytes())  # rounds[k][c]: client c's k-th batch (gzip)

from rl_insight.server.app import create_app
from rl_insight.server.config import ServerConfig
from rl_insight.server.http.gc_policy import fit_collector

data = tempfile.mkdtemp(prefix="rl-intake-cpu-")
config = ServerConfig(host="127.0.0.1", port=18080, data_dir=data, **overrides)
app = create_app(config)
fit_collector(config.gc_policy)


def usage():
    """(server process, its child processes): CPU seconds so far, as bench_fanin reads them from /proc."""
    return cpu_seconds([os.getpid()])


async def post(body, out):
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/api/v1/ingest", "raw_path": b"/api/v1/ingest", "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1:18080"), (b"content-type", b"application/json"),
                         (b"content-encoding", b"gzip"), (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 18080)}
    given = False
    forever = asyncio.Event()

    async def receive():
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await forever.wait()

    status = []

    async def send(message):
        if message["type"] == "http.response.start":
            status.append(message["status"])

    started = time.perf_counter()
    await app(scope, receive, send)
    out.append((time.perf_counter() - started, status[0] if status else 0))


async def load(first_round, span_s, out):
    """Every client's batch once a second at its own phase, for span_s seconds, starting with rounds[first_round]."""
    loop = asyncio.get_running_loop()
    t0, tasks = loop.time(), []
    per_round = len(rounds[0])
    for i in range(int(span_s * per_round)):
        k, c = divmod(i, per_round)
        at = t0 + k + c / per_round
        delay = at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(post(rounds[(first_round + k) % len(rounds)][c], out)))
    await asyncio.gather(*tasks)


async def main():
    life_in, life_out = asyncio.Queue(), asyncio.Queue()
    await life_in.put({"type": "lifespan.startup"})
    life = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"}}, life_in.get, life_out.put))
    assert (await life_out.get())["type"] == "lifespan.startup.complete"
    await load(0, warmup, [])
    before, wall = usage(), time.perf_counter()
    out = []
    await load(int(warmup), seconds, out)
    after, wall = usage(), time.perf_counter() - wall
    await life_in.put({"type": "lifespan.shutdown"})
    await life_out.get()
    await life
    lat = sorted(s for s, _ in out)
    failed = sum(1 for _, st in out if st != 200)
    n = len(out)
    print(json.dumps({"batches": n, "wall_s": wall, "failed": failed,
                      "server_ms": (after[0] - before[0]) / n * 1e3, "children_ms": (after[1] - before[1]) / n * 1e3,
                      "p50_ms": lat[n // 2] * 1e3, "p99_ms": lat[int(n * 0.99)] * 1e3}))


asyncio.run(main())
'''


def measure(code: Path, bodies: Path, args: argparse.Namespace) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code)}
    argv = [sys.executable, "-c", CHILD, str(bodies), str(args.seconds), str(args.warmup), str(args.clients),
            args.config, str(Path(__file__).resolve().parent)]
    proc = subprocess.run(argv, env=env, cwd=code, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"measurement in {code} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default=None, help="a checkout to compare with (git worktree add …); "
                                                     "without one, this checkout alone")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--counters", type=int, default=0, help="of each batch's 20 series, this many are counters every "
                                                              "client feeds (their run-store sums, issue 49 item 4)")
    ap.add_argument("--config", default="{}", help='server config fields for both, as JSON (e.g. '
                    '\'{"insights_interval_s": 3600}\': the insight rounds off)')
    args = ap.parse_args()
    print(f"machine: {machine()}")
    n_rounds = int(args.seconds + args.warmup) + 1
    bodies = Path(tempfile.mkdtemp(prefix="rl-intake-bodies-")) / "bodies.pickle"
    bodies.write_bytes(pickle.dumps([[batch(f"c{c:05d}", k, args.counters) for c in range(args.clients)]
                                         for k in range(n_rounds)]))
    targets = [("ours", ROOT)] + ([("baseline", Path(args.baseline).resolve())] if args.baseline else [])
    results: dict[str, list[dict]] = {name: [] for name, _ in targets}
    for r in range(args.rounds):
        order = targets if r % 2 == 0 else targets[::-1]
        for name, code in order:
            m = measure(code, bodies, args)
            results[name].append(m)
            print(f"  round {r + 1} {name:8s}: {m['batches'] / m['wall_s']:7.0f} batches/s, server "
                  f"{m['server_ms']:.3f} ms a batch, children {m['children_ms']:.3f} ms, p50 {m['p50_ms']:.1f} ms, "
                  f"p99 {m['p99_ms']:.1f} ms, failed {m['failed']}", flush=True)
    med = {name: {k: statistics.median(m[k] for m in ms) for k in ("server_ms", "children_ms", "p99_ms")}
           for name, ms in results.items()}
    for name, m in med.items():
        print(f"{name:8s} median: server {m['server_ms']:.3f} ms a batch, children {m['children_ms']:.3f} ms, "
              f"p99 {m['p99_ms']:.1f} ms")
    if args.baseline:
        o, b = med["ours"], med["baseline"]
        print(f"ours / baseline: server {o['server_ms'] / b['server_ms']:.3f}, children "
              f"{o['children_ms'] / b['children_ms']:.3f}, both "
              f"{(o['server_ms'] + o['children_ms']) / (b['server_ms'] + b['children_ms']):.3f}")


if __name__ == "__main__":
    main()

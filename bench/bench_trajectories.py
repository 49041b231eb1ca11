"""Trajectory view at scale: 10,000 trajectories per step x 200 steps (2M trajectories, ~20M turns) in one run store,
then the UI's requests over real HTTP against a real server on that store: a step's table page (sorted, filtered,
paged; target < 300 ms), a trajectory's waterfall (target < 100 ms), a step's distributions, the steps list.
Also the indexer's cost in the writer thread: the same spans written as agent-loop turns and as plain spans,
interleaved, and the ratio.

    python bench/bench_trajectories.py [--steps 200] [--per-step 10000] [--requests 200] [--keep DIR]

The store is built in bulk by SQL (turn rows, then every trajectory's totals as the writer's indexer computes
them, checked against it on a sample), because writing 20M spans through ingest would take most of an hour here.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import IngestServer, machine

from rl_insight.protocol import SpanRecord
from rl_insight.server.runstore.backend import open_backend
from rl_insight.server.runstore.trajectories.index import TrajectoryStore
from rl_insight.server.runstore.writer import RunStoreWriter

TOOLS = ("search", "python", "browser", "calculator")
REPLICAS = 16
MS = 10**6


def build(path: Path, steps: int, per_step: int) -> tuple[int, int, float]:
    """Trajectories with 2-20 turns (generate, tool, generate, …), some tools slow, a few failing."""
    conn = open_backend(path).connect()
    t0 = time.perf_counter()
    conn.execute(
        "INSERT INTO runs (id, project, experiment_name, first_seen, last_seen, last_step) VALUES (1, 'bench', "
        "'agents', ?, ?, ?)",
        (time.time(), time.time(), steps),
    )
    base = time.time_ns() - steps * 60_000 * MS
    conn.execute("BEGIN")
    for step in range(1, steps + 1):
        first = (step - 1) * per_step + 1
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            "INSERT INTO trajectories (id, run_id, key, info_step, step, sample, source, status, reward, "
            "reported_turns, replica) "
            "SELECT ? + i, 1, 'experiment=agents/sample=' || (i / 8) || '/session=s/traj=' || (i % 8) || '/step=' || "
            "?, ?, ?, i / 8, 'session', "
            "CASE WHEN abs(random()) % 200 = 0 THEN 'error' ELSE 'success' END, (abs(random()) % 1000) / 1000.0, "
            "2 + abs(random()) % 19, 'replica_' || (i % ?) FROM n",
            (per_step - 1, first, step, step, step, REPLICAS),
        )
        # turns: even k generate (on the trajectory's replica), odd k a tool; a turn starts 5 ms after the previous ends
        conn.execute(
            "WITH RECURSIVE t(traj, k, n, start, tool) AS ("
            "  SELECT id, 0, reported_turns, ? + (id % 1000) * ?, abs(random()) % 4 FROM trajectories WHERE run_id = "
            "1 AND info_step = ? "
            "  UNION ALL SELECT traj, k + 1, n, start + 5000000 + CASE WHEN k % 2 = 0 THEN (50 + abs(random()) % "
            "400) ELSE "
            "    CASE tool WHEN 2 THEN 200 + abs(random()) % 3000 ELSE 20 + abs(random()) % 300 END END * 1000000, "
            "abs(random()) % 4 "
            "  FROM t WHERE k + 1 < n) "
            "INSERT INTO turns (traj, start_ns, span_id, end_ns, kind, name, step, replica, tokens_in, tokens_out, "
            "error) "
            "SELECT traj, start, printf('%08x%08x', traj, k), start + CASE WHEN k % 2 = 0 THEN (50 + abs(random()) % "
            "400) ELSE "
            "  CASE tool WHEN 2 THEN 200 + abs(random()) % 3000 ELSE 20 + abs(random()) % 300 END END * 1000000, "
            "CASE WHEN k % 2 = 0 THEN 'generate' ELSE 'tool' END, "
            "CASE WHEN k % 2 = 0 THEN 'gateway_generation' ELSE CASE tool WHEN 0 THEN 'search' WHEN 1 THEN 'python' "
            "WHEN 2 THEN 'browser' "
            "  ELSE 'calculator' END END, ?, CASE WHEN k % 2 = 0 THEN 'replica_' || (traj % ?) END, "
            "CASE WHEN k % 2 = 0 THEN 500 + k * 300 END, CASE WHEN k % 2 = 0 THEN 20 + abs(random()) % 500 END, "
            "CASE WHEN k % 2 = 1 AND abs(random()) % 100 = 0 THEN 'timeout' END FROM t",
            (base + step * 60_000 * MS, 10 * MS, step, step, REPLICAS),
        )
        # every trajectory's totals, as TrajectoryStore._recompute computes them one by one
        conn.execute(
            "UPDATE trajectories SET start_ns = a.s, end_ns = a.e, duration_s = (a.e - a.s) / 1e9, turns = a.n, "
            "generates = a.g, "
            "tool_calls = a.tc, tool_errors = a.te, tokens_in = a.ti, tokens_out = a.tout, generate_s = a.gs, tool_s "
            "= a.ts, tools = a.names "
            "FROM (SELECT traj, min(start_ns) s, max(end_ns) e, count(*) n, sum(kind = 'generate') g, sum(kind = "
            "'tool') tc, "
            "  sum(kind = 'tool' AND error IS NOT NULL) te, sum(tokens_in) ti, sum(tokens_out) tout, "
            "  sum(CASE WHEN kind = 'generate' THEN end_ns - start_ns END) / 1e9 gs, sum(CASE WHEN kind = 'tool' "
            "THEN end_ns - start_ns END) / 1e9 ts, "
            "  (SELECT ',' || group_concat(name, ',') || ',' FROM (SELECT DISTINCT name FROM turns x WHERE x.traj = "
            "turns.traj AND kind = 'tool' "
            "   ORDER BY name)) names "
            "  FROM turns WHERE traj BETWEEN ? AND ? GROUP BY traj) a WHERE trajectories.id = a.traj",
            (first, first + per_step - 1),
        )
        if step % 20 == 0:
            conn.execute("COMMIT")
            print(f"  built step {step}/{steps} ({time.perf_counter() - t0:.0f} s)", flush=True)
            conn.execute("BEGIN")
    conn.execute("COMMIT")
    n_traj, n_turns = conn.execute("SELECT count(*), sum(turns) FROM trajectories").fetchone()
    # the bulk totals are what the writer's indexer would have computed
    for (tid,) in conn.execute("SELECT id FROM trajectories ORDER BY random() LIMIT 20").fetchall():
        before = conn.execute("SELECT turns, tool_calls, tool_errors, tokens_out, duration_s, tools FROM "
                              "trajectories WHERE id = ?", (tid,)).fetchone()
        TrajectoryStore._recompute(conn, 1, tid)
        after = conn.execute("SELECT turns, tool_calls, tool_errors, tokens_out, duration_s, tools FROM trajectories "
                             "WHERE id = ?", (tid,)).fetchone()
        assert before[:4] == after[:4] and abs(before[4] - after[4]) < 1e-6 and before[5] == after[5], (before, after)
    conn.execute("ANALYZE")
    conn.close()
    return n_traj, n_turns, time.perf_counter() - t0


def measure(url: str, steps: int, per_step: int, n: int) -> dict[str, list[float]]:
    rng = random.Random(7)
    times: dict[str, list[float]] = {"table page": [], "waterfall": [], "distributions": [], "steps list": []}
    base = f"{url}/api/v1/runs/1/trajectories"
    sorts = [
        ("duration", "true"),
        ("reward", "false"),
        ("turns", "true"),
        ("tool_errors", "true"),
        ("tokens_out", "true"),
    ]
    with httpx.Client(timeout=60) as c:
        c.get(base + "/steps").raise_for_status()  # warm the connection and the server
        for i in range(n):  # the kinds interleaved, so machine noise hits them alike
            step = rng.randint(1, steps)
            sort, desc = rng.choice(sorts)
            params = {"step": step, "sort": sort, "desc": desc, "offset": rng.choice([0, 0, 50, 5000]), "limit": 50}
            extra = rng.choice(
                [
                    {},
                    {"tool": rng.choice(TOOLS)},
                    {"replica": f"replica_{rng.randrange(REPLICAS)}"},
                    {"failed": "true"},
                    {"min_turns": 15},
                ]
            )
            for kind, path, p in (
                ("table page", base, {**params, **extra}),
                ("waterfall", f"{base}/{rng.randint(1, steps * per_step)}", {}),
                ("distributions", base + "/stats", {"step": step}) if i % 4 == 0 else (None, None, None),
                ("steps list", base + "/steps", {}) if i % 4 == 1 else (None, None, None),
            ):
                if kind is None:
                    continue
                t0 = time.perf_counter()
                r = c.get(path, params=p)
                times[kind].append(time.perf_counter() - t0)
                r.raise_for_status()
    return times


def indexing_cost(turns: int) -> tuple[float, float]:
    """Writer seconds for the same spans as agent-loop turns (indexed) and as plain spans, interleaved, median of 3."""
    d = Path(tempfile.mkdtemp(prefix="rl-bench-idx-"))
    results: dict[bool, list[float]] = {True: [], False: []}
    try:
        for rnd in range(3):
            for indexed in (False, True):
                w = RunStoreWriter(d / f"{rnd}-{indexed}.sqlite", flush_interval_s=0.01)
                spans = []
                for i in range(turns):
                    lane = f"experiment=e/sample={i // 80}/session=s/traj={i // 10 % 8}"
                    attrs = {
                        "project": "p",
                        "experiment_name": "e",
                        "global_steps": i // 10_000,
                        "prompt_tokens": 100,
                        "completion_tokens": 20,
                    }
                    if indexed:
                        attrs["monitor.trace_source"] = "gateway" if i % 2 == 0 else "tool"
                    spans.append(
                        SpanRecord(
                            f"{i:016x}",
                            "t" * 32,
                            None,
                            "gateway_generation",
                            lane,
                            "span",
                            i * MS,
                            i * MS + MS // 2,
                            attrs,
                        )
                    )
                for k in range(0, turns, 2000):
                    w.put_spans([], spans[k:k + 2000])
                assert w.flush(600)
                results[indexed].append(w.stats.write_seconds)
                w.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return statistics.median(results[False]), statistics.median(results[True])


def _postgres_copy(store: Path) -> tuple[object, str]:
    """The SQLite store moved into a throwaway PostgreSQL 15 cluster with `server migrate`'s code; (cluster, URL)."""
    import os

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from rl_insight.server.runstore.backend.location import parse_store, sqlite_location
    from rl_insight.server.runstore.backend.transfer import migrate
    from tests.pg_cluster import PASSWORD, PostgresCluster

    cluster = PostgresCluster()
    cluster.wait_ready()
    os.environ["RL_INSIGHT_STORE_PASSWORD"] = PASSWORD
    url = cluster.url(cluster.create_database("traj"))
    t0 = time.perf_counter()
    report = migrate(sqlite_location(store), parse_store(url, store.parent), chunk=20_000)
    rows = sum(c[1] for c in report.counts.values())
    took = time.perf_counter() - t0
    print(f"moved into PostgreSQL by `server migrate`: {rows:,} rows in {took:.0f} s ({rows / took:,.0f} rows/s)")
    return cluster, url


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--per-step", type=int, default=10_000)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--index-turns", type=int, default=100_000)
    ap.add_argument("--keep", help="build into this directory (or reuse the store already there)")
    ap.add_argument("--postgres", action="store_true", help="also: the same store moved into a throwaway "
                                                            "PostgreSQL 15 cluster (`server migrate`), queried in "
                                                            "alternating rounds with the SQLite one")
    a = ap.parse_args()
    print(f"machine: {machine()}")
    d = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="rl-bench-traj-"))
    d.mkdir(parents=True, exist_ok=True)
    store = d / "runstore.sqlite"
    try:
        if not store.exists():
            n_traj, n_turns, secs = build(store, a.steps, a.per_step)
            print(f"built {n_traj:,} trajectories, {n_turns:,} turns in {secs:.0f} s; store "
                  f"{store.stat().st_size / 2**30:.2f} GiB")
        backends = {"sqlite": IngestServer(data_dir=str(d))}
        cluster = None
        try:
            if a.postgres:
                cluster, url = _postgres_copy(store)
                (d / "pg-server").mkdir(exist_ok=True)
                backends["postgresql"] = IngestServer(data_dir=str(d / "pg-server"), store_url=url)
            all_times: dict[str, dict[str, list[float]]] = {b: {} for b in backends}
            for _ in range(2):  # alternating rounds: the machine's noise falls on both
                for b, srv in backends.items():
                    for kind, ts in measure(srv.url, a.steps, a.per_step, a.requests // 2).items():
                        all_times[b].setdefault(kind, []).extend(ts)
        finally:
            for srv in backends.values():
                srv.stop()
            if cluster is not None:
                cluster.stop()
        targets = {"table page": 0.300, "waterfall": 0.100}
        for b, times in all_times.items():
            for kind, ts in times.items():
                ts.sort()
                p95 = ts[min(len(ts) - 1, int(0.95 * len(ts)))]
                target = (
                    f" (target < {targets[kind] * 1e3:.0f} ms: {'met' if p95 < targets[kind] else 'MISSED'} at p95)"
                    if kind in targets
                    else ""
                )
                print(f"{b:10s} {kind:14s} n={len(ts):4d}  median {statistics.median(ts) * 1e3:7.1f} ms  "
                      f"p95 {p95 * 1e3:7.1f} ms  max {ts[-1] * 1e3:7.1f} ms{target}")
        plain, indexed = indexing_cost(a.index_turns)
        print(
            f"writer: {a.index_turns:,} spans as plain spans {plain:.2f} s, as agent-loop turns (indexed) "
            f"{indexed:.2f} s: "
            f"{indexed / plain:.2f}x, {a.index_turns / indexed:,.0f} turns/s"
        )
    finally:
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()

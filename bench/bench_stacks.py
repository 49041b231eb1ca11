"""Stack snapshots: grouping on the server, and the time from request to a complete snapshot of a hung job.

    python bench/bench_stacks.py [--reports 1000] [--processes 64]

1. Grouping: `--reports` process answers (the real protocol: each decoded by `decode_stack_report`) of realistic
   depth (40 frames on the lane-holding thread, 6 other threads) grouped and summarised (rooms/stacks/groups.py).
   Target: 1,000 reports < 1 s.
2. A hung job: `--processes` real Python processes (the training client, each holding a lane in a state that never
   ends, idle otherwise: they hear only at their 10 s heartbeat) and a real ingest server; the time from the POST to
   a complete snapshot. Target: within the heartbeat interval + 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _util import IngestServer, machine

from rl_insight.protocol import CLIENT_HEARTBEAT_S, decode_stack_report
from rl_insight.server.rooms.stacks import groups as stack_groups

SITE = "/opt/venv/lib/python3.11/site-packages"


def synthetic_report(rank: int, late: int) -> dict:
    outer = [{"file": f"{SITE}/ray/_private/worker.py", "line": 900 + i, "func": f"frame_{i}"} for i in range(30)]
    if rank == late:
        leaf = [{"file": "/job/train.py", "line": 41, "func": "load_batch", "code": "time.sleep(30)"}]
    else:
        leaf = [{"file": f"{SITE}/torch/distributed/c10d_logger.py", "line": 81, "func": "wrapper"},
                {"file": f"{SITE}/torch/distributed/distributed_c10d.py", "line": 3252, "func": "all_reduce",
                 "code": "work.wait()"}]
    main = outer + [{"file": "/job/train.py", "line": 10 + i, "func": f"step_{i}"} for i in range(8)] + leaf
    others = [{"id": 100 + t, "name": f"worker-{t}", "frames": outer[:12]} for t in range(6)]
    return {"process": {"host": f"node{rank // 8}", "pid": 1000 + rank, "rank": rank, "lanes": [f"rank_{rank}"]},
            "taken_ns": time.time_ns(), "step": 7, "rss_bytes": 2**30, "cpu_s": 12.5,
            "threads": [{"id": 1, "name": "MainThread", "main": True,
                         "lanes": [{"lane": f"rank_{rank}", "state": "actor_update", "since_ns": 1}], "frames": main},
                        *others]}


def bench_grouping(n: int) -> dict:
    bodies = [json.dumps(synthetic_report(r, late=n // 2)).encode() for r in range(n)]
    t0 = time.perf_counter()
    reports = {f"node{r // 8}:{1000 + r}": decode_stack_report(json.loads(b)) for r, b in enumerate(bodies)}
    decoded = time.perf_counter() - t0
    snap = {"id": "x", "created_at": time.time(), "reports": reports, "missing": []}
    t1 = time.perf_counter()
    stack_groups.summarise(snap, None, time.time_ns())
    grouped = time.perf_counter() - t1
    return {"reports": n, "bytes_per_report": sum(map(len, bodies)) // n, "decode_s": round(decoded, 3),
            "group_s": round(grouped, 3), "total_s": round(decoded + grouped, 3), "summary": snap["summary"]}


HUNG = r"""
import os, sys, time
import rl_insight
rl_insight.init("bench", "hung")
block = rl_insight.trace_state("actor_update", state_lane_id=f"rank_{os.environ['BENCH_RANK']}")
block.__enter__()
rl_insight.flush(10)
print("ready", flush=True)
time.sleep(600)
"""


def bench_hung_job(n: int) -> dict:
    server = IngestServer()
    env = {**os.environ, "RL_INSIGHT_SERVER_URL": server.url, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    procs = [subprocess.Popen([sys.executable, "-c", HUNG], env={**env, "BENCH_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for r in range(n)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        c = httpx.Client(base_url=server.url, timeout=30)
        run_id = c.get("/api/v1/runs").json()["runs"][0]["id"]
        time.sleep(CLIENT_HEARTBEAT_S / 2)  # the processes are idle: they hear at their next heartbeat
        t0 = time.monotonic()
        sid = c.post(f"/api/v1/runs/{run_id}/stacks", json={}).json()["id"]
        while (snap := c.get(f"/api/v1/runs/{run_id}/stacks/{sid}").json())["state"] == "pending":
            time.sleep(0.1)
        took = time.monotonic() - t0
        return {"processes": n, "answered": snap["answered"], "expected": snap["expected_count"],
                "request_to_complete_s": round(took, 2), "target_s": CLIENT_HEARTBEAT_S + 2,
                "server_side_s": round(snap["completed_at"] - snap["created_at"], 2), "summary": snap["summary"]}
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reports", type=int, default=1000)
    ap.add_argument("--processes", type=int, default=64)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    print(json.dumps({"grouping": bench_grouping(args.reports)}, indent=2))
    print(json.dumps({"hung_job": bench_hung_job(args.processes)}, indent=2))


if __name__ == "__main__":
    main()

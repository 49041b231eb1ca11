"""The read routes' answers, this checkout against another, side by side (issue 50 item 1: typed answers that
FastAPI validates and serializes through their declared types, where it encoded plain dicts before).

    git worktree add /tmp/before HEAD~1
    python bench/bench_read_answers.py --baseline /tmp/before [--rounds 5]

One store (a run with one 20,000-sample series, 300 runs beside it), filled once through HTTP; then each round starts
a server per checkout on a copy of it, in turn, and times the same requests against each: a whole series at full
resolution (`agg=none`, 20,000 points), the runs list, the run's metrics. Medians of the rounds, and their ratio.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import IngestServer, machine

REQUESTS = {
    "series, 20,000 points": ("/api/v1/runs/1/series", {"name": "big", "agg": "none", "points": "20000"}),
    "runs list, 301 runs": ("/api/v1/runs", {}),
    "metrics of a run": ("/api/v1/runs/1/metrics", {}),
}


def fill(data_dir: str) -> None:
    srv = IngestServer(data_dir=data_dir)
    try:
        t0 = time.time() - 30_000
        for start in range(0, 20_000, 2_000):
            body = {"v": 1, "client": {"id": "big", "project": "p", "experiment_name": "big"},
                    "series": [{"k": "g", "n": "big", "l": {"project": "p", "experiment_name": "big"}}],
                    "samples": [[0, t0 + i, i, float(i) * 0.5] for i in range(start, start + 2_000)]}
            assert httpx.post(srv.url + "/api/v1/ingest", json=body, timeout=60).status_code == 200
        for r in range(300):
            body = {"v": 1, "client": {"id": f"c{r}", "project": "p", "experiment_name": f"run-{r}"},
                    "series": [{"k": "g", "n": "m", "l": {"project": "p", "experiment_name": f"run-{r}"}}],
                    "samples": [[0, time.time(), 1, 1.0]]}
            assert httpx.post(srv.url + "/api/v1/ingest", json=body, timeout=60).status_code == 200
    finally:
        srv.stop()


def measure(code: str | None, data_dir: str, repeat: int) -> dict[str, float]:
    work = tempfile.mkdtemp(prefix="rl-bench-read-")
    shutil.copytree(data_dir, work, dirs_exist_ok=True)
    srv = IngestServer(data_dir=work, code=code)
    try:
        out = {}
        with httpx.Client(base_url=srv.url, timeout=60) as c:
            for label, (path, params) in REQUESTS.items():
                assert c.get(path, params=params).status_code == 200  # warm
                times = []
                for _ in range(repeat):
                    t = time.perf_counter()
                    assert c.get(path, params=params).status_code == 200
                    times.append(time.perf_counter() - t)
                out[label] = statistics.median(times)
        return out
    finally:
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True, help="a checkout of the code to compare with")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=15, help="requests of each kind per server (their median)")
    args = ap.parse_args()
    print(machine())
    data = tempfile.mkdtemp(prefix="rl-bench-read-store-")
    fill(data)
    got: dict[str, dict[str, list[float]]] = {"baseline": {}, "ours": {}}
    for _ in range(args.rounds):
        for name, code in (("baseline", args.baseline), ("ours", None)):  # interleaved
            for label, t in measure(code, data, args.repeat).items():
                got[name].setdefault(label, []).append(t)
    for label in REQUESTS:
        b, o = statistics.median(got["baseline"][label]), statistics.median(got["ours"][label])
        print(f"  {label:24s} baseline {b * 1e3:8.2f} ms   ours {o * 1e3:8.2f} ms   ours/baseline {o / b:5.2f}x")


if __name__ == "__main__":
    main()

"""The training loop's step time outside a profiling window, with and without a profile request.

    python bench/bench_profile_window.py [--steps 30] [--iters 400] [--rounds 3]

A real ingest server and one rank of `tests/profile_job.py` (fixed torch work per step, trace_state stages,
the step metric) with the client enabled; runs with a request for the middle step and runs without,
interleaved. Reports the median step time of the steps well before and after the window in both, and
the profiled step itself.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from _util import machine

from tests.conftest import free_port, start_server

TOKEN = "bench"


def run_job(url: str, experiment: str, steps: int, iters: int) -> dict[int, float]:
    env = {
        **os.environ,
        "RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "RL_INSIGHT_SERVER_URL": url,
        "RL_INSIGHT_TOKEN": TOKEN,
        "JOB_PROJECT": "bench",
        "JOB_EXPERIMENT": experiment,
        "PROFILE_JOB_ITERS": str(iters),
        "PYTHONPATH": str(ROOT),
    }
    out = subprocess.run([sys.executable, "-m", "tests.profile_job", str(steps), "0"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return {
        int(line.split()[1]): float(line.split()[2]) for line in out.stdout.splitlines() if line.startswith("step ")
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--iters", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    srv = start_server(Path(tempfile.mkdtemp(prefix="rl-bench-profile-")), token=TOKEN)
    api = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    target = args.steps // 2
    outside = [s for s in range(3, args.steps + 1) if abs(s - target) > 2]
    base, prof, window = [], [], []
    try:
        for i in range(args.rounds):
            base.append(statistics.median(run_job(srv.url, f"base{i}", args.steps, args.iters)[s] for s in outside))
            api.post("/api/v1/profiles", json={"project": "bench", "experiment_name": f"prof{i}", "steps": str(target),
                                               "activities": ["cpu"]}).raise_for_status()
            times = run_job(srv.url, f"prof{i}", args.steps, args.iters)
            prof.append(statistics.median(times[s] for s in outside))
            window.append(times[target])
            time.sleep(0.5)
    finally:
        srv.stop()
    b, p = statistics.median(base), statistics.median(prof)
    print(
        f"  {args.steps} steps of {args.iters} 64x64 matmuls; request for step {target}; outside = steps {outside[0]}.."
        f"{outside[-1]} except {target - 2}..{target + 2}; {args.rounds} rounds interleaved"
    )
    print(f"  no request:        median step outside the window {b * 1e3:.1f} ms (runs "
          f"{', '.join(f'{x * 1e3:.1f}' for x in base)})")
    print(
        f"  request, step {target}: median step outside the window {p * 1e3:.1f} ms (runs "
        f"{', '.join(f'{x * 1e3:.1f}' for x in prof)})"
        f"  ratio {p / b:.3f}"
    )
    print(f"  the profiled step itself: {statistics.median(window) * 1e3:.1f} ms "
          f"({statistics.median(window) / b:.2f}x)")


if __name__ == "__main__":
    main()

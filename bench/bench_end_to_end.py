"""Time from `metric_gauge` to the value being queryable in a real Prometheus (scrape interval 10 s).

    python bench/bench_end_to_end.py [--samples 5]

Starts `rl-insight server start --detach` in a temporary home, then for each sample sets a gauge
to a fresh value at a random point in the scrape cycle and polls Prometheus every 50 ms.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import free_port, machine


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=5)
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="rl-e2e-")
    port, prom_port = free_port(), free_port()
    env = {**os.environ, "RL_INSIGHT_HOME": home}
    cli = [sys.executable, "-m", "rl_insight", "server"]
    subprocess.run([*cli, "start", "--detach", "--host", "127.0.0.1", "--port", str(port), "--prometheus-port",
                    str(prom_port), "--scrape-interval", "10s"], check=True, env=env, capture_output=True)
    print(f"machine: {machine()}")
    import rl_insight

    os.environ["RL_INSIGHT_SERVER_URL"] = f"http://127.0.0.1:{port}"
    rl_insight.init(project="e2e", experiment_name="latency")
    latencies = []
    try:
        for i in range(args.samples):
            time.sleep(random.uniform(0, 10))
            value = 1000 + i
            t0 = time.monotonic()
            rl_insight.metric_gauge("e2e_probe", value)
            while True:
                r = httpx.get(
                    f"http://127.0.0.1:{prom_port}/api/v1/query", params={"query": "rl_insight_monitor_e2e_probe"}
                )
                res = r.json()["data"]["result"]
                if res and float(res[0]["value"][1]) == value:
                    break
                time.sleep(0.05)
            latencies.append(time.monotonic() - t0)
            print(f"  sample {i}: visible in Prometheus after {latencies[-1]:.2f}s")
        print(f"  median {statistics.median(latencies):.2f}s, max {max(latencies):.2f}s "
              f"(target: scrape interval 10s + 2s = 12s)")
    finally:
        rl_insight.finish(timeout=2)
        subprocess.run([*cli, "stop"], env=env, capture_output=True)


if __name__ == "__main__":
    main()

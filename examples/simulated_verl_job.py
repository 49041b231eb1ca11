"""A small simulated verl job that uses the training API exactly as verl's RLInsightLogger does.

    RL_INSIGHT_SERVER_URL=http://127.0.0.1:18080 python examples/simulated_verl_job.py --steps 30

Per step: rollout on `replica_0..3` (many concurrent generate coroutines), old-log-prob, ref and
actor update on `rank_0..N`, then the trainer metrics verl logs. (`rl-insight demo` will grow into
the full simulation with stand-in engines and exporters.)
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import time

import rl_insight


async def generate(replica: int) -> None:
    with rl_insight.trace_state("vllm_generate", state_lane_id=f"replica_{replica}"):
        await asyncio.sleep(random.uniform(0.05, 0.3 if replica else 0.6))  # replica_0 is the long tail


async def rollout(replicas: int) -> None:
    await asyncio.gather(*(generate(i % replicas) for i in range(8 * replicas)))


def train_phase(name: str, ranks: int, seconds: float) -> None:
    # Workers run in parallel in verl; here the lanes are simply opened together.
    blocks = [rl_insight.trace_state(name, state_lane_id=f"rank_{r}") for r in range(ranks)]
    for b in blocks:
        b.__enter__()
    time.sleep(seconds)
    for b in blocks:
        b.__exit__(None, None, None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--ranks", type=int, default=4)
    args = ap.parse_args()
    url = os.environ.get("RL_INSIGHT_SERVER_URL", "http://127.0.0.1:18080")
    os.environ["RL_INSIGHT_SERVER_URL"] = url
    rl_insight.init(project="demo", experiment_name=f"sim-{int(time.time())}")
    print(f"sending to {url}; watch {url}/metrics (and Prometheus on :9090 when it runs)")
    for step in range(1, args.steps + 1):
        t0 = time.time()
        asyncio.run(rollout(args.replicas))
        t_gen = time.time() - t0
        for phase, sec in (("actor_compute_log_prob", 0.05), ("ref_compute_log_prob", 0.05), ("actor_update", 0.1)):
            train_phase(phase, args.ranks, sec)
        reward = 1 - math.exp(-step / 10) + random.gauss(0, 0.03)
        data = {
            "training/global_step": step,
            "critic/score/mean": reward,
            "actor/pg_loss": 0.5 * math.exp(-step / 15) + random.gauss(0, 0.01),
            "actor/entropy": 1.2 * math.exp(-step / 40),
            "response_length/mean": 300 + 10 * step,
            "timing_s/gen": t_gen,
            "timing_s/step": time.time() - t0,
            "perf/throughput": 1000 / max(time.time() - t0, 1e-3),
        }
        for key, value in data.items():  # verl: metric_gauge(key.replace("/", "_"), float(value))
            rl_insight.metric_gauge(key.replace("/", "_"), float(value))
        print(f"step {step}: reward {reward:.3f}")
    rl_insight.finish()
    print("done:", rl_insight.stats() if rl_insight.is_enabled() else "flushed")


if __name__ == "__main__":
    main()

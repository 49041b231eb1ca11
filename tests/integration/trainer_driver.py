"""A separate training process driven line by line from stdin, using the API exactly as verl does.

Commands (one per line): `verl_step S`, `states`, `register PORT`, `count NAME N`, `flush`, `exit`.
Each command answers one line on stdout (`ok …`), so the test knows when it has happened.
"""

from __future__ import annotations

import asyncio
import json
import sys

from prometheus_client import CollectorRegistry, Gauge, start_http_server

import rl_insight


def verl_log(data: dict, step: int) -> None:
    """verl RLInsightLogger.log: lazy bare init(), float() the values, '/' -> '_' in keys, step ignored."""
    if not rl_insight.is_enabled():
        rl_insight.init()
    for key, value in data.items():
        try:
            v = float(value)
        except (TypeError, ValueError):
            continue
        rl_insight.metric_gauge(key.replace("/", "_"), v)


async def generate(i: int) -> None:
    # verl wraps vLLM generate in trace_state("vllm_generate", state_lane_id=f"replica_{rank}")
    with rl_insight.trace_state("vllm_generate", state_lane_id=f"replica_{i % 4}"):
        await asyncio.sleep(0.02)


async def rollout() -> None:
    await asyncio.gather(*(generate(i) for i in range(16)))


def main() -> None:
    exporters = []
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "verl_step":
            s = int(args[0])
            verl_log({"training/global_step": s, "actor/pg_loss": 0.5 / s, "timing_s/gen": 1.5 * s,
                      "val-core/openai/gsm8k/acc/mean@1": 0.1 * s, "note": "not a number"}, s)
        elif cmd == "states":
            asyncio.run(rollout())
        elif cmd == "register":  # a real prometheus-client exporter standing in for a vLLM replica
            reg = CollectorRegistry()
            Gauge("vllm:num_requests_running", "Running requests", ["model_name"], registry=reg).labels("qwen").set(3)
            start_http_server(int(args[0]), addr="127.0.0.1", registry=reg)
            exporters.append(reg)
            rl_insight.update_prometheus_config([f"127.0.0.1:{args[0]}"], "vllm", [{"replica": 0}])
        elif cmd == "count":
            if not rl_insight.is_enabled():
                rl_insight.init()
            for _ in range(int(args[1])):
                rl_insight.metric_count(args[0], 1)
        elif cmd == "flush":
            ok = rl_insight.flush(float(args[0]) if args else 30.0)
            print("ok", json.dumps({"flushed": ok, **rl_insight.stats()}), flush=True)
            continue
        elif cmd == "exit":
            rl_insight.finish()
            print("ok exit", flush=True)
            return
        print("ok", cmd, flush=True)


if __name__ == "__main__":
    main()

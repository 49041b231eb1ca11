"""A job profiled and monitored at once, for the goodput ledger's online / offline agreement (issue 53): `python -m
tests.ledger_job` once per process (RANK, WORLD_SIZE = 3, MASTER_ADDR, MASTER_PORT, RL_INSIGHT_SERVER_URL, LEDGER_OUT).

Ranks 0 and 1 are trainer ranks, rank 2 a rollout replica. Each step the replica generates (a different time each
step) while the trainers wait, then the trainers recompute log-probs and train while the replica waits; gloo barriers
order the phases (rank 0 logs the step as its training ends, before the barrier after it). Every phase is reported
to the server as an RL state (`rl_insight.trace_state`) and recorded by
torch.profiler (`record_function`, one file per process, each step marked `step N`), so the server's ledger and
`rl-insight analyze`'s are of the same seconds. Rank 0 logs `training/global_step` at the end of each step, and the
job's token counts and verl's length metrics (tokens/generated, perf/total_num_tokens, …) to the server and to a verl
console log (`verl.log`, `step:N - key:value - …`).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Iterator, TextIO

import torch
import torch.distributed as dist

import rl_insight

STEPS = 5
GEN_S = (0.45, 0.35, 0.55, 0.40, 0.50)
TRAIN_S, LOGPROB_S = 0.25, 0.10


@contextmanager
def phase(name: str, lane: str) -> Iterator[None]:
    with rl_insight.trace_state(name, state_lane_id=lane), torch.profiler.record_function(name):
        yield


def log_step(step: int, log: TextIO) -> None:
    metrics = {"training/global_step": step, "tokens/generated": 1000.0 * step, "tokens/filtered": 250.0,
               "perf/total_num_tokens": 4 * (100 + 150) + 0.0, "prompt_length/mean": 100.0,
               "response_length/mean": 150.0}  # 4 sequences trained, 600 tokens
    for key, value in metrics.items():
        rl_insight.metric_gauge(key.replace("/", "_"), float(value))
    log.write(f"step:{step} - " + " - ".join(f"{k}:{v}" for k, v in metrics.items()) + "\n")


def main() -> None:
    out = os.environ["LEDGER_OUT"]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    rollout = rank == 2
    lane = "replica_0" if rollout else f"rank_{rank}"
    rl_insight.init(project="ledger", experiment_name="online-offline")
    log = open(os.path.join(out, "verl.log"), "w") if rank == 0 else None
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        dist.barrier()
        for step in range(1, STEPS + 1):
            with torch.profiler.record_function(f"step {step}"):
                if rollout:
                    with phase("vllm_generate", lane):
                        time.sleep(GEN_S[step - 1])
                dist.barrier()
                if not rollout:
                    with phase("actor_compute_log_prob", lane):
                        time.sleep(LOGPROB_S)
                    with phase("update_actor", lane):
                        time.sleep(TRAIN_S)
                if log is not None:  # the step logged as its training ends (before the barrier: its wait is not)
                    log_step(step, log)
                dist.barrier()
    name = f"rollout-replica-0_rank0_pid{os.getpid()}_{time.strftime('%Y%m%d%H%M%S')}000" if rollout else \
        f"actor-rollout-ref_rank{rank}-of-2_pid{os.getpid()}_{time.strftime('%Y%m%d%H%M%S')}000"
    prof.export_chrome_trace(os.path.join(out, name + ".json.gz"))
    if log is not None:
        log.close()
    rl_insight.finish(10)
    dist.barrier()  # every rank has written before any closes its sockets
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

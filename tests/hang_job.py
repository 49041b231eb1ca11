"""A torch.distributed (gloo) job that hangs, for the stack snapshot tests: `python -m tests.hang_job` once per rank
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, JOB_PROJECT, JOB_EXPERIMENT in the environment).

Each step is a `trace_state("actor_update")` on lane rank_<r> around a little torch work, an all_reduce (the
gradients) and a broadcast (the parameters), then the step metric. At step HANG_STEP, rank HANG_RANK either sleeps
HANG_S seconds before its all_reduce (HANG_MODE=late: the other ranks wait in the collective), skips its all_reduce
(skip: it calls the broadcast where the others call the all_reduce, a desync), calls them the other way round (order),
all-reduces another size (sizes), or is frozen mid-step (frozen: SIGSTOP, sockets still open). The snapshot and the
verdict must name it. Prints `step N` per step and `done` at the end.
"""

from __future__ import annotations

import os
import signal
import time

import torch
import torch.distributed as dist

import rl_insight


def late_rank_pause(seconds: float) -> None:
    time.sleep(seconds)  # the late rank: everyone else waits for it in all_reduce


def main() -> None:
    steps = int(os.environ.get("HANG_STEPS", "3"))
    hang_step, hang_rank = int(os.environ.get("HANG_STEP", "2")), int(os.environ.get("HANG_RANK", "2"))
    hang_s = float(os.environ.get("HANG_S", "60"))
    mode = os.environ.get("HANG_MODE", "late")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    rl_insight.init(os.environ["JOB_PROJECT"], os.environ["JOB_EXPERIMENT"])
    a = torch.ones(32, 32)
    for step in range(1, steps + 1):
        with rl_insight.trace_state("actor_update", state_lane_id=f"rank_{rank}"):
            for _ in range(10):
                a = (a @ a).clamp(-1, 1)
            if step == hang_step and rank == hang_rank and mode == "late":
                late_rank_pause(hang_s)
            t = torch.ones(4) * rank
            faulty = step == hang_step and rank == hang_rank
            if faulty and mode == "frozen":
                # stopped mid-step (SIGSTOP): no beat, no answer, its sockets still open — as a process whose thread
                # holds the GIL in native code, or a node gone dark (a dead process's peers would see its sockets
                # close, and gloo's would fail instead of hanging)
                rl_insight.flush(10)  # (a process that ran a while has been heard of; this one froze within a second)
                os.kill(os.getpid(), signal.SIGSTOP)
            if faulty and mode == "order":  # the same two collectives, the other way round
                dist.broadcast(torch.ones(8), 0)
                dist.all_reduce(t)
                continue
            if faulty and mode == "sizes":
                t = torch.ones(5)  # a different size than the other ranks' all_reduce
            if not (faulty and mode == "skip"):
                dist.all_reduce(t)  # (skip: this rank's next collective meets the others' all_reduce)
            dist.broadcast(torch.ones(8), 0)
        rl_insight.metric_gauge("training/global_step", step)
        print(f"step {step}", flush=True)
    rl_insight.finish(timeout=10)
    dist.destroy_process_group()
    print("done", flush=True)


if __name__ == "__main__":
    main()

"""A verl-shaped training job for the profile-on-demand tests: `python -m tests.profile_job STEPS STEP_S`
run once per gloo rank (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment).

Each step: a `trace_state("generate")` around torch work named `gen_step<N>`, then a
`trace_state("actor_update")` on lane rank_<r> around real torch work named `work_step<N>`
(so a trace says which steps it covers), an all-reduce, then the step metric, as verl logs it.
PROFILE_JOB_UNTIL_ARMED holds step 1 until the client heard its pending profile request.
Prints `step N <seconds>` per step (the loop's own step time) and `done` at the end.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist

import rl_insight


def main() -> None:
    steps, step_s = int(sys.argv[1]), float(sys.argv[2])
    exit_at = int(os.environ.get("PROFILE_JOB_EXIT_AT", "0"))  # exit in the middle of this step (atexit runs)
    fixed = int(os.environ.get("PROFILE_JOB_ITERS", "0"))  # fixed work per step instead of STEP_S (benchmarks)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    rl_insight.init(os.environ["JOB_PROJECT"], os.environ["JOB_EXPERIMENT"])
    # "model loading" (PROFILE_JOB_LOAD_S): a real job spends minutes before step 1, while its client hears pending
    # requests and warms torch.profiler up; the tests' jobs start at once (a window waits for the warm-up)
    load_s = float(os.environ.get("PROFILE_JOB_LOAD_S", "0"))
    if load_s:
        rl_insight.metric_gauge("job_loading", 1.0)
        time.sleep(load_s)
    # PROFILE_JOB_UNTIL_ARMED (seconds at most): "load" until this process's client has heard the request it was
    # sent before the job started (armed), as a real job's minutes of loading outlast the client's first reply; a
    # first step begun before that reply would rightly make the request "expired", however loaded the machine is
    until_armed = float(os.environ.get("PROFILE_JOB_UNTIL_ARMED", "0"))
    if until_armed:
        from rl_insight.client import api

        deadline = time.monotonic() + until_armed
        # in its lane's first state, as a verl worker's init: a request for that lane selects this process only once
        # its client knows the lane
        with rl_insight.trace_state("init_model", state_lane_id=f"rank_{rank}"):
            while not (api._rt is not None and api._rt.profiling.hot) and time.monotonic() < deadline:
                time.sleep(0.02)
    a = torch.ones(64, 64)
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        with rl_insight.trace_state("generate", state_lane_id=f"rank_{rank}"):  # a first stage (stage requests)
            with torch.profiler.record_function(f"gen_step{step}"):
                b = torch.ones(32, 32)
                for _ in range(20):
                    b = (b @ b).clamp(-1, 1)
        with rl_insight.trace_state("actor_update", state_lane_id=f"rank_{rank}"):
            with torch.profiler.record_function(f"work_step{step}"):
                if fixed:
                    for _ in range(fixed):
                        a = (a @ a).clamp(-1, 1)
                else:
                    end = time.monotonic() + step_s
                    while time.monotonic() < end:
                        a = (a @ a).clamp(-1, 1)
                t = torch.ones(4) * rank
                dist.all_reduce(t)
                if step == exit_at:
                    print("exiting", flush=True)
                    sys.exit(3)
        rl_insight.metric_gauge("training/global_step", step)
        print(f"step {step} {time.perf_counter() - t0:.4f}", flush=True)
    rl_insight.finish(timeout=10)
    dist.destroy_process_group()
    print("done", flush=True)


if __name__ == "__main__":
    main()

"""One process of a job sending through a fleet of ingest servers, for the fleet tests: `python -m tests.fleet_job`
with RL_INSIGHT_SERVER_URL (a load balancer, or several servers), JOB_RANK, JOB_STEPS, JOB_STEP_S and, for a process
that hangs in a state until it is killed, JOB_HANG=1.

Each step: `trace_state("train_batch")` on lane rank_<r>, one `done` count, and (rank 0) the step metric. Prints
`sent` once everything was delivered, then finishes.
"""

from __future__ import annotations

import os
import time

import rl_insight


def main() -> None:
    rank, steps, step_s = int(os.environ["JOB_RANK"]), int(os.environ["JOB_STEPS"]), float(os.environ["JOB_STEP_S"])
    rl_insight.init("fleet", "failover")
    if os.environ.get("JOB_HANG"):
        with rl_insight.trace_state("wedged", state_lane_id=f"rank_{rank}"):
            rl_insight.flush(10)
            print("hanging", flush=True)
            time.sleep(3600)
    for step in range(1, steps + 1):
        with rl_insight.trace_state("train_batch", state_lane_id=f"rank_{rank}"):
            time.sleep(step_s / 2)
        rl_insight.metric_count("done", 1)
        if rank == 0:
            rl_insight.metric_gauge("training/global_step", step)
        time.sleep(step_s / 2)
    print("sent" if rl_insight.flush(60) else "not sent", flush=True)
    rl_insight.finish()


if __name__ == "__main__":
    main()

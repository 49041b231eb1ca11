"""A gloo job whose rank 2 desynchronizes, for comparing rl-insight's collective wavefront with PyTorch's own
flight-recorder analyzer on the same entries: `python -m tests.fr_job` once per rank (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, FR_MODE = skip | order | sizes, FR_OUT = a directory).

Each step is an all_reduce and a broadcast; at step 2 rank 2 skips its all_reduce, calls the two the other way round,
or all-reduces another size. A second after the hang every rank writes what each side reads: PyTorch's pickled dump
(`rank_<r>`, for `python -m torch.distributed.flight_recorder.fr_trace`) and rl-insight's client evidence
(`rl_<r>.json`, client/control/stacks/flight_recorder.py), then exits.
"""

from __future__ import annotations

import json
import os
import pickle
import threading
import time
from datetime import timedelta

os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from rl_insight.client.control.stacks import flight_recorder  # noqa: E402


def write(rank: int, out: str) -> None:
    from torch._C._distributed_c10d import _dump_fr_trace

    time.sleep(2.0)
    dump = pickle.loads(_dump_fr_trace(True, True))
    # gloo names no process group in pg_config (its key is ""), which torch's analyzer needs to match the entries'
    # group ("0"); the ranks it lists are right
    dump["pg_config"] = {"0": {**next(iter(dump["pg_config"].values())), "name": "0", "desc": "default_pg"}}
    with open(os.path.join(out, f"rank_{rank}"), "wb") as f:
        pickle.dump(dump, f)
    with open(os.path.join(out, f"rl_{rank}.json"), "w") as f:
        json.dump(flight_recorder.read(), f)
    time.sleep(2.0)  # every rank has written before any closes its sockets (a peer's close fails the others' waits)
    os._exit(0)


def main() -> None:
    mode, out = os.environ["FR_MODE"], os.environ["FR_OUT"]
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    threading.Thread(target=write, args=(rank, out), daemon=True).start()
    for step in (1, 2, 3):
        faulty = step == 2 and rank == 2
        t = torch.ones(5 if faulty and mode == "sizes" else 4)
        if faulty and mode == "order":
            dist.broadcast(torch.ones(8), 0)
            dist.all_reduce(t)
            continue
        if not (faulty and mode == "skip"):
            dist.all_reduce(t)
        dist.broadcast(torch.ones(8), 0)
    time.sleep(60)


if __name__ == "__main__":
    main()

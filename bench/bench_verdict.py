"""A fault corpus with a score: seeded faults in synthetic evidence of 1,000-4,096 ranks, judged by the server's own
code (rooms/stacks/groups.summarise, then rooms/stacks/verdict.decide), scored against the fault injected.

    python bench/bench_verdict.py [--ranks 1024,4096] [--cases 40] [--seed 1]

Each case is one snapshot of a job whose trainer ranks each hold `train_batch` (and, with the flight recorder on,
report their process group's wavefront and newest entries), plus a few innocent processes in no state (a driver, idle
rollout workers). The faults: a late rank (stuck in its data loader or in a callback), a rank that skipped a
collective, one that called it with other sizes, one whose ops come in another order, a dead process, a process
whose GIL is held (it stopped beating too), a rollout replica stuck in generation, and slow-but-healthy steps (every
rank in the collective, the threads moving between two snapshots). Beside the faults, healthy jobs sampled mid-step
(issue 64): mid-rollout (replicas generating, ranks waiting), mid-training (a fifth of the ranks still computing or
loading while the rest wait in the collective), mid-weight-sync (a replica still loading), every lane open for less
than its usual length. Each case's `lanes_usual` is what the stall watch would say, by its own rule
(semantics/insights.stalled over the open states and each state's usual durations). Half the cases have the flight
recorder off.

Scores: top-1 culprit accuracy on the hangs (the verdict's first culprit is the rank injected); the class; false
verdicts on slow-but-healthy cases (a hang class, or any culprit); the time from the answers to the verdict for N
ranks on this machine (grouping and deciding: what the server does when a snapshot completes). The comparison with
torch's own flight-recorder analyzer on the same entries is not made here (see bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import machine  # noqa: E402

from rl_insight.semantics import insights  # noqa: E402
from rl_insight.server.rooms.stacks import groups  # noqa: E402
from rl_insight.server.rooms.stacks.verdict import HANG_CLASSES, decide  # noqa: E402

SITE = "/venv/lib/python3.11/site-packages"
NOW_NS = 2_000_000_000 * 10**9


def _f(file: str, line: int, func: str) -> dict[str, Any]:
    return {"file": file, "line": line, "func": func}


def collective(op: str = "all_reduce", line: int = 3252) -> list[dict[str, Any]]:
    return [_f("/job/main_ppo.py", 10, "main"), _f("/job/fsdp_workers.py", 400, "update_actor"),
            _f(f"{SITE}/torch/distributed/c10d_logger.py", 81, "wrapper"),
            _f(f"{SITE}/torch/distributed/distributed_c10d.py", line, op)]


def loader() -> list[dict[str, Any]]:
    return [_f("/job/main_ppo.py", 10, "main"), _f("/job/fsdp_workers.py", 380, "update_actor"),
            _f(f"{SITE}/torch/utils/data/dataloader.py", 631, "__next__"),
            _f("/usr/lib/python3.11/queue.py", 180, "get")]


def callback() -> list[dict[str, Any]]:
    return [_f("/job/main_ppo.py", 10, "main"), _f("/job/callbacks.py", 55, "on_step_end"),
            _f("/usr/lib/python3.11/threading.py", 327, "wait")]


def generating(line: int = 900) -> list[dict[str, Any]]:
    return [_f("/job/rollout.py", 20, "generate_sequences"), _f(f"{SITE}/vllm/engine/llm_engine.py", line, "step")]


def fr(enq: int, done: int, ops: dict[int, tuple[str, list[list[int]]]] | None = None) -> dict[str, Any]:
    ops = ops or {}
    entries = [{"seq": s, "p2p": False, "op": "nccl:" + ops.get(s, ("all_reduce", [[4096]]))[0], "pg": "0",
                "in_sizes": ops.get(s, ("all_reduce", [[4096]]))[1], "state": "scheduled", "retired": s <= done}
               for s in range(max(1, enq - 7), enq + 1)]
    return {"state": "ok", "groups": {"0": {"name": "default_pg", "enqueued": enq, "completed": done}},
            "entries": entries}


def report(rank: int, frames: list[dict[str, Any]], lane: str | None, recorder: dict[str, Any] | None,
           host: str, open_s: float = 300.0, state: str | None = None) -> dict[str, Any]:
    state = state or ("generate_sequences" if lane and lane.startswith("replica") else "train_batch")
    lanes = [{"lane": lane, "state": state, "since_ns": NOW_NS - int(open_s * 1e9)}] if lane else []
    out = {"process": {"host": host, "pid": 1000 + rank, "rank": rank, "lanes": [lane] if lane else [], "roles": []},
           "step": 41, "cpu_s": 10.0,
           "threads": [{"id": 1, "name": "MainThread", "main": True, "sender": False, "lanes": lanes,
                        "frames": frames}]}
    if recorder is not None:
        out["flight_recorder"] = recorder
    return out


FAULTS = ("late_loader", "late_callback", "skip", "sizes", "order", "dead", "gil", "rollout", "slow_healthy",
          "healthy_rollout", "healthy_training", "healthy_sync")
EXPECTED = {"late_loader": "late_rank", "late_callback": "late_rank", "skip": "desync", "sizes": "desync",
            "order": "desync", "dead": "dead_process", "gil": "dead_process", "rollout": "not_collective",
            "slow_healthy": "slow_healthy", "healthy_rollout": "not_stuck", "healthy_training": "not_stuck",
            "healthy_sync": "not_stuck"}
HEALTHY = ("healthy_rollout", "healthy_training", "healthy_sync")


def usual_times(rng: random.Random) -> dict[str, list[float]]:
    """Each state's finished durations so far (s): what the stall watch compares an open state with."""
    return {"train_batch": [rng.uniform(20, 40) for _ in range(20)],
            "generate_sequences": [rng.uniform(30, 60) for _ in range(20)],
            "weight_sync": [rng.uniform(4, 8) for _ in range(20)]}


def within(history: dict[str, list[float]], state: str, rng: random.Random) -> float:
    """How long a state has been open at a moment sampled inside its usual length."""
    return rng.uniform(0, max(history[state]))


def healthy_case(n: int, fault: str, rng: random.Random, recorder_on: bool,
                 history: dict[str, list[float]]) -> dict[str, Any]:
    """A job at work, sampled mid-step, every lane within its usual time: stacks differ rank by rank as they do."""
    seq = rng.randrange(50, 5000)
    reports: dict[str, Any] = {}
    for r in range(n):
        host = f"node{r // 8}"
        if fault == "healthy_rollout":  # the ranks wait for rollout (in no state); replicas generate, some done
            reports[f"{host}:{1000 + r}"] = report(r, callback(), None, None, host)
        elif fault == "healthy_training":  # most ranks in the collective, the rest still computing or loading
            busy = rng.random() < 0.2
            frames = (loader() if rng.random() < 0.5 else callback()) if busy else collective()
            rec = fr(seq if busy else seq + 1, seq) if recorder_on else None
            reports[f"{host}:{1000 + r}"] = report(r, frames, f"rank_{r}", rec, host,
                                                   within(history, "train_batch", rng))
        else:  # weight sync: ranks broadcast the new weights, one replica still loading them
            rec = fr(seq + 1, seq, {seq + 1: ("broadcast", [[4096]])}) if recorder_on else None
            reports[f"{host}:{1000 + r}"] = report(r, collective("broadcast", 2620), f"rank_{r}", rec, host,
                                                   within(history, "weight_sync", rng), "weight_sync")
    for i in range(8):
        if fault == "healthy_rollout":
            busy = rng.random() < 0.7
            reports[f"rollout{i}:{i}"] = report(10_000 + i, generating() if busy else callback(),
                                               f"replica_{i}" if busy else None, None, f"rollout{i}",
                                               within(history, "generate_sequences", rng))
        elif fault == "healthy_sync":
            reports[f"rollout{i}:{i}"] = report(10_000 + i, generating(950) if i == 0 else callback(),
                                               f"replica_{i}", None, f"rollout{i}",
                                               within(history, "weight_sync", rng), "weight_sync")
    for i in range(3):
        reports[f"driver:{i}"] = report(20_000 + i, callback(), None, None, "driver")
    return {"id": "s", "created_at": 1000.0, "completed_at": 1014.0, "reports": reports, "missing": []}


def lanes_usual(snap: dict[str, Any], history: dict[str, list[float]]) -> bool:
    """What the stall watch's latest look says of the run (the server's RunConditions.lanes_usual): no open state
    past its usual length, by the same rule (semantics/insights.stalled)."""
    spans = [{"lane": held["lane"], "name": held["state"], "start_ns": held["since_ns"], "end_ns": None,
              "kind": "state"}
             for rep in snap["reports"].values() for t in rep["threads"] for held in t["lanes"]]
    spans += [{"lane": o["lane"], "name": o["state"], "start_ns": o["since_ns"], "end_ns": None, "kind": "state"}
              for m in snap["missing"] for o in m.get("open") or []]
    return not insights.stalled(spans, NOW_NS, history=history)


def case(n: int, fault: str, rng: random.Random, recorder_on: bool) -> tuple[dict[str, Any], dict | None, str | None]:
    """A snapshot (and the previous one, for the slow-but-healthy case) of `n` trainer ranks, and the culprit's lane."""
    k = rng.randrange(n)
    seq = rng.randrange(50, 5000)
    reports: dict[str, Any] = {}
    missing: list[dict[str, Any]] = []
    for r in range(n):
        host = f"node{r // 8}"
        frames, rec = collective(), fr(seq + 1, seq) if recorder_on else None
        if r == k:
            if fault in ("late_loader", "late_callback"):
                frames = loader() if fault == "late_loader" else callback()
                rec = fr(seq, seq) if recorder_on else None
            elif fault == "skip":
                frames = collective("broadcast", 2620)
                rec = fr(seq + 1, seq, {seq + 1: ("broadcast", [[128]])}) if recorder_on else None
            elif fault == "sizes":
                rec = fr(seq + 1, seq, {seq + 1: ("all_reduce", [[4095]])}) if recorder_on else None
            elif fault == "order":
                frames = collective("all_gather", 2850)
                rec = fr(seq + 1, seq, {seq + 1: ("all_gather", [[4096]])}) if recorder_on else None
            elif fault in ("dead", "gil"):
                missing.append({"host": host, "pid": 1000 + r, "rank": r, "lanes": [f"rank_{r}"],
                                "last_seen_ns": NOW_NS - 25 * 10**9, "beating": False,
                                "open": [{"lane": f"rank_{r}", "state": "train_batch",
                                          "since_ns": NOW_NS - 300 * 10**9}]})
                continue
        reports[f"{host}:{1000 + r}"] = report(r, frames, f"rank_{r}", rec, host)
    if fault == "rollout":  # the ranks wait for rollout (in no state); one replica is stuck generating
        reports = {key: {**rep, "threads": [{**rep["threads"][0], "lanes": [],
                                             "frames": callback()}]} for key, rep in reports.items()}
        for i in range(8):
            reports[f"rollout{i}:{i}"] = report(10_000 + i, generating(), f"replica_{i}" if i == k % 8 else None,
                                               None, f"rollout{i}")
    for i in range(3):  # innocents: a driver and idle workers, in no state
        reports[f"driver:{i}"] = report(20_000 + i, callback(), None, None, "driver")
    snap: dict[str, Any] = {"id": "s", "created_at": 1000.0, "completed_at": 1014.0, "reports": reports,
                            "missing": missing}
    previous = None
    if fault == "slow_healthy":  # every rank in the collective, and some of them moved since the previous snapshot
        previous = {"id": "p", "created_at": 990.0, "completed_at": 1000.0, "reports": dict(reports), "missing": []}
        groups.summarise(previous, None, NOW_NS)
        for key in rng.sample(sorted(k for k in reports if not k.startswith("driver")), max(1, n // 10)):
            rep = reports[key]
            reports[key] = {**rep, "threads": [{**rep["threads"][0], "frames": collective(line=3300)}]}
    culprit = None if fault == "slow_healthy" else (f"replica_{k % 8}" if fault == "rollout" else f"rank_{k}")
    return snap, previous, culprit


def judge(snap: dict[str, Any], previous: dict | None, history: dict[str, list[float]]) -> tuple[dict[str, Any], float]:
    snap["lanes_usual"] = lanes_usual(snap, history)
    t0 = time.perf_counter()
    groups.summarise(snap, previous, NOW_NS)  # type: ignore[arg-type]
    verdict = decide(snap, NOW_NS)
    return verdict, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="1024,4096")
    ap.add_argument("--cases", type=int, default=40, help="cases per fault and size")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    rng = random.Random(args.seed)
    for n in (int(x) for x in args.ranks.split(",")):
        top1 = classes = hangs = false_verdicts = healthy = 0
        by_recorder = {True: [0, 0], False: [0, 0]}  # flight recorder on / off: [top-1 right, hangs]
        times: list[float] = []
        wrong: dict[str, int] = {}
        for fault in FAULTS:
            for i in range(args.cases):
                history = usual_times(rng)
                if fault in HEALTHY:
                    snap, previous, culprit = healthy_case(n, fault, rng, i % 2 == 0, history), None, None
                else:
                    snap, previous, culprit = case(n, fault, rng, recorder_on=i % 2 == 0)
                v, took = judge(snap, previous, history)
                times.append(took)
                right_class = v["class"] == EXPECTED[fault]
                classes += right_class
                if culprit is None:
                    healthy += 1
                    false_verdicts += v["class"] in HANG_CLASSES or bool(v["culprits"])
                else:
                    hangs += 1
                    right = bool(v["culprits"]) and v["culprits"][0] == culprit
                    top1 += right
                    by_recorder[i % 2 == 0][0] += right
                    by_recorder[i % 2 == 0][1] += 1
                if not right_class or (culprit and (not v["culprits"] or v["culprits"][0] != culprit)):
                    wrong[f"{fault}->{v['class']}"] = wrong.get(f"{fault}->{v['class']}", 0) + 1
        print(f"  {n} ranks, {len(times)} cases ({args.cases} per fault, flight recorder on in half):")
        print(f"    top-1 culprit accuracy on hangs: {100 * top1 / hangs:.1f} % ({top1}/{hangs})")
        for on, (right, total) in by_recorder.items():
            print(f"      flight recorder {'on' if on else 'off'}: {100 * right / total:.1f} % ({right}/{total})")
        print(f"    class accuracy: {100 * classes / len(times):.1f} %")
        print(f"    false verdicts on healthy runs (slow-but-healthy and mid-step rollout, training, weight sync; a "
              f"hang class or any culprit): {100 * false_verdicts / healthy:.1f} % ({false_verdicts}/{healthy})")
        print(f"    time from the answers to the verdict: median {statistics.median(times):.3f} s, "
              f"max {max(times):.3f} s")
        if wrong:
            print(f"    misjudged: {wrong}")


if __name__ == "__main__":
    main()

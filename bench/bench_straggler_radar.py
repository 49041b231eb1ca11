"""The fail-slow radar's score on seeded synthetic jobs (issue 66; semantics/stragglers.py): is the culprit and its
cause named within three clean steps of the onset, how many findings does a healthy job get, how long does a step
take to analyse.

    python bench/bench_straggler_radar.py [--ranks 1024,4096] [--runs 20] [--healthy-steps 1000] [--seed 7]

The job (seeded; the detector's own tests use other seeds and other shapes): trainer ranks `rank_*` each step load
data (50 ms), compute (1 s), all-reduce (arrive, wait for the last rank, 100 ms of transfer) and step the optimizer
(50 ms); 64 rollout replicas `replica_*` receive weights (200 ms) and generate (2 s). Noise: the whole step 5 %
(log-normal, every lane alike), each lane 1.5 % more every step (replicas' generation 5 %), each lane a fixed bias
of 0.5 %, and one lane-step in ten thousand a one-off hiccup of +10 % (two in a row on one lane are a straggler, if
a short one: at one in a thousand, 4,096 lanes would have such a pair every 250 steps). Healthy runs also hold a
checkpoint on rank 0 every 20 steps, a validation every 25 and a profiling window on one rank. Faults, one per run,
from a random onset step: one rank's compute 10 % slower; one rank's link (its part of every all-reduce 2.5x); one
rank's data loader 4x; one replica's generation 30 % slower; one replica's weight sync 3x (its host's network).

A run scores a hit when the radar's first finding names the faulty lane and the fault's cause, opened at most 2
clean steps after the onset (the onset step and the two after it: "within 3 steps"). False findings: every finding of
a healthy run, per 1,000 healthy steps. Time: the radar's `step` per step at the largest size (lane_times and the
candidates), median.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._util import machine  # noqa: E402
from rl_insight.semantics import stragglers  # noqa: E402

NS = 1_000_000_000
REPLICAS = 64
HICCUP_RATE = 1e-4  # a one-off +10 % on a lane-step (two in a row on one lane are a real, if short, straggler)
FAULTS = {"compute": "rank", "communication": "rank", "input": "rank", "rollout_generation": "replica",
          "weight_sync": "replica"}


class Job:
    """One synthetic job's steps as span dicts (the run store's shape)."""

    def __init__(self, ranks: int, rng: random.Random, fault: str | None, onset: int, healthy_extras: bool) -> None:
        self.ranks, self.rng, self.fault, self.onset = ranks, rng, fault, onset
        self.extras = healthy_extras
        self.bias = {f"rank_{r}": rng.gauss(1, 0.005) for r in range(ranks)}
        self.bias.update({f"replica_{r}": rng.gauss(1, 0.005) for r in range(REPLICAS)})
        kind = FAULTS.get(fault or "", "rank")
        self.culprit = f"{kind}_{rng.randrange(ranks if kind == 'rank' else REPLICAS)}"
        self.profiled = f"rank_{rng.randrange(ranks)}"
        self.t = 0

    def _x(self, lane: str, sigma: float) -> float:
        hiccup = 1.10 if self.rng.random() < HICCUP_RATE else 1.0
        return self.bias[lane] * max(0.5, self.rng.gauss(1, sigma)) * hiccup

    def step(self, s: int) -> tuple[list[dict[str, Any]], int, int]:
        common = math.exp(self.rng.gauss(0, 0.05))
        faulty = self.fault is not None and s >= self.onset
        a = self.t
        spans: list[dict[str, Any]] = []

        def add(lane: str, name: str, t0: float, t1: float) -> None:
            spans.append({"lane": lane, "name": name, "kind": "state", "start_ns": a + int(t0 * NS),
                          "end_ns": a + int(t1 * NS)})

        checkpoint = self.extras and s % 20 == 0
        validation = self.extras and s % 25 == 0
        profiling = self.extras and s in (30, 31)
        arrive: dict[str, float] = {}
        parts: dict[str, tuple[float, float]] = {}
        for r in range(self.ranks):
            lane = f"rank_{r}"
            hit = faulty and lane == self.culprit
            data = 0.05 * common * self._x(lane, 0.015) * (4 if hit and self.fault == "input" else 1)
            compute = 1.0 * common * self._x(lane, 0.015) * (1.10 if hit and self.fault == "compute" else 1)
            if profiling and lane == self.profiled:
                compute *= 1.3
            add(lane, "get_batch", 0.0, data)
            add(lane, "forward_backward", data + 0.002, data + 0.002 + compute)
            arrive[lane] = data + 0.004 + compute
            parts[lane] = (data, compute)
        last = max(arrive.values())
        end = 0.0
        for r in range(self.ranks):
            lane = f"rank_{r}"
            hit = faulty and lane == self.culprit
            transfer = 0.1 * common * self._x(lane, 0.015) * (2.5 if hit and self.fault == "communication" else 1)
            add(lane, "all_reduce", arrive[lane], last + transfer)
            opt = 0.05 * common * self._x(lane, 0.015)
            add(lane, "optimizer_step", last + transfer + 0.002, last + transfer + 0.002 + opt)
            end = max(end, last + transfer + 0.002 + opt)
        if checkpoint:
            add("rank_0", "save_checkpoint", end, end + 3.0)
            end += 3.0
        if validation:
            for r in range(self.ranks):
                add(f"rank_{r}", "validate", end, end + 0.5)
            end += 0.5
        if profiling:
            add(self.profiled, "profile_window", 0.0, end)
        for r in range(REPLICAS):
            lane = f"replica_{r}"
            hit = faulty and lane == self.culprit
            sync = 0.2 * common * self._x(lane, 0.015) * (3 if hit and self.fault == "weight_sync" else 1)
            gen = 2.0 * common * self._x(lane, 0.05) * (1.3 if hit and self.fault == "rollout_generation" else 1)
            add(lane, "update_weights", end, end + sync)
            add(lane, "vllm_generate", end + sync + 0.002, end + sync + 0.002 + gen)
        total = end + 2.5 * common * 1.5
        self.t += int(total * NS)
        return spans, a, a + int(total * NS)


def faulty_run(ranks: int, fault: str, seed: int, steps: int = 60) -> tuple[bool, int | None, str]:
    """(hit, clean steps from onset to the finding, what the first finding said)."""
    rng = random.Random(seed)
    onset = rng.randrange(10, 40)
    job = Job(ranks, rng, fault, onset, healthy_extras=True)
    radar = stragglers.Radar()
    clean_since_onset = 0
    for s in range(steps):
        spans, a, b = job.step(s)
        opened = radar.step(s, spans, a, b)
        if s >= onset and stragglers.clean(spans) and s >= stragglers.WARMUP_STEPS:
            clean_since_onset += 1
        if opened:
            f = opened[0]
            if s < onset:
                return False, None, f"before the onset: {f.subject} {f.cause} at {s}"
            ok = f.subject == job.culprit and f.cause == fault and clean_since_onset <= 3
            return ok, clean_since_onset, f"{f.subject} {f.cause} after {clean_since_onset} clean steps"
    return False, None, "nothing found"


def healthy_steps(ranks: int, seed: int, steps: int) -> tuple[int, list[str]]:
    rng = random.Random(seed)
    job = Job(ranks, rng, None, 0, healthy_extras=True)
    radar = stragglers.Radar()
    for s in range(steps):
        spans, a, b = job.step(s)
        radar.step(s, spans, a, b)
    return len(radar.findings), [f"{f.subject} {f.cause} {f.first_step}-{f.last_step}" for f in radar.findings]


def step_time(ranks: int, seed: int, steps: int = 12) -> float:
    rng = random.Random(seed)
    job = Job(ranks, rng, "compute", 5, healthy_extras=False)
    radar = stragglers.Radar()
    times = []
    for s in range(steps):
        spans, a, b = job.step(s)
        t0 = time.perf_counter()
        radar.step(s, spans, a, b)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[stragglers.WARMUP_STEPS:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="1024,4096")
    ap.add_argument("--runs", type=int, default=20, help="runs per fault and size")
    ap.add_argument("--healthy-steps", type=int, default=1000, help="healthy steps per size")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    sizes = [int(x) for x in args.ranks.split(",")]
    for ranks in sizes:
        hits = total = 0
        delays: list[int] = []
        for fault in FAULTS:
            got = []
            for i in range(args.runs):
                seed = args.seed * 1_000_003 + i * 7919 + list(FAULTS).index(fault) * 101
                ok, delay, said = faulty_run(ranks, fault, seed)
                got.append(ok)
                if ok and delay is not None:
                    delays.append(delay)
                elif not ok:
                    print(f"  miss {ranks} ranks {fault} run {i}: {said}")
            hits += sum(got)
            total += len(got)
            print(f"{ranks} ranks, {fault}: {sum(got)}/{len(got)} named with their cause within 3 clean steps")
        runs_of_healthy = max(1, args.healthy_steps // 200)
        false = 0
        for i in range(runs_of_healthy):
            n, said = healthy_steps(ranks, args.seed * 31 + i, args.healthy_steps // runs_of_healthy)
            false += n
            for x in said:
                print(f"  false finding ({ranks} ranks): {x}")
        print(f"{ranks} ranks: top-1 {hits}/{total} = {hits / total:.1%}; clean steps to the finding: median "
              f"{statistics.median(delays) if delays else '-'}, max {max(delays) if delays else '-'}; "
              f"false findings {false} in {args.healthy_steps} healthy steps "
              f"({1000 * false / args.healthy_steps:.2f} per 1,000)")
    print(f"analysis per step at {sizes[-1]} ranks + {REPLICAS} replicas: {step_time(sizes[-1], args.seed):.3f} s "
          f"(median)")


if __name__ == "__main__":
    main()

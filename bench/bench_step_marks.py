"""The step as one stored fact (issue 65): reading a run's step windows from its stored marks against recomputing
them from the step metric's samples per query (as every window read did before schema 12), and what marking costs
the writer.

    python bench/bench_step_marks.py [--steps 2000] [--processes 64] [--rounds 9]

Writes, through the real writer, a run whose `--processes` processes each log `training/global_step` at the end of
every one of `--steps` steps (each at its own time, as a job whose every rank logs it), twice: into a store whose
writer marks the steps and into one whose writer does not (a step metric it does not know), batch by batch
interleaved, and reports each writer's seconds. Then times the step windows read both ways, interleaved, median of
`--rounds`, and checks both give the same windows.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import machine

from rl_insight.semantics.insights import step_windows
from rl_insight.server.runstore import queries as q
from rl_insight.server.runstore import step_marks
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.writer import RunStoreWriter

NAME = "training_global_step"


def recomputed(conn, run_id: int) -> list[tuple[int, int, int]]:
    """The windows as every read made them before the marks: all the step metric's samples, per query."""
    return step_windows(q.metric_values(conn, run_id, NAME))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--processes", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    d = Path(tempfile.mkdtemp(prefix="rl-step-marks-bench-"))
    marking = RunStoreWriter(d / "marks.sqlite")
    plain = RunStoreWriter(d / "plain.sqlite", step_metric="not/the_step_metric")
    t0 = 1.7e9
    for step in range(1, args.steps + 1):  # one batch a step: every process's sample of it
        batch = [SampleRow("p", "e", NAME, "gauge", "{}", float(step), t0 + 10 * step + p / 1000, float(step))
                 for p in range(args.processes)]
        for w in (marking, plain):
            w.put_samples(batch)
            assert w.flush(60)
    seconds = {"marking": marking.stats.write_seconds, "plain": plain.stats.write_seconds}
    marking.close()
    plain.close()
    print(f"{args.steps} steps x {args.processes} processes = {args.steps * args.processes} step-metric samples")
    print(f"writer seconds: marking {seconds['marking']:.3f}, not marking {seconds['plain']:.3f} "
          f"({seconds['marking'] / seconds['plain']:.2f}x)")

    conn = RunStoreReader(d / "marks.sqlite").conn()
    run_id = q.find_run_id(conn, "p", "e")
    assert run_id is not None
    from_marks = step_windows([(ts, float(s)) for ts, s in step_marks.marks(conn, run_id, NAME)])
    assert from_marks == recomputed(conn, run_id), "the marks and the samples disagree"
    times: dict[str, list[float]] = {"marks": [], "samples": []}
    for _ in range(args.rounds):  # interleaved
        t = time.perf_counter()
        step_windows([(ts, float(s)) for ts, s in step_marks.marks(conn, run_id, NAME)])
        times["marks"].append(time.perf_counter() - t)
        t = time.perf_counter()
        recomputed(conn, run_id)
        times["samples"].append(time.perf_counter() - t)
    m, s = statistics.median(times["marks"]), statistics.median(times["samples"])
    print(f"step windows of the run ({len(from_marks)} steps): from the marks {m * 1e3:.1f} ms, "
          f"from the samples {s * 1e3:.1f} ms ({s / m:.1f}x)")


if __name__ == "__main__":
    main()

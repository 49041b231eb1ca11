"""Offline analysis benchmark: a synthetic 1M-event torch trace (~236 MB of JSON, the real key set).

    python bench/bench_analysis.py [--events 1000000] [--upstream VENV_PYTHON] [--rounds 3]

Measures `rl_insight.analysis.load` (parse + event table + nesting) in a fresh process with its peak RSS,
for the default detail (annotations and communication) and with every CPU op kept. With --upstream it
runs upstream RL-Insight 0.3.0's torch parser on the same file in that virtual environment's Python, and
then the whole command line of each, end to end on the same `.json.gz`, interleaved, `--rounds` times:
upstream's recipe (`python -m recipe.main input.path=DIR timeline.parser.type=torch`, one HTML timeline)
against `rl-insight analyze DIR --format html` (the same kind of output) and with its default formats.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import machine

STAGES = ["actor_compute_log_prob", "ref_compute_log_prob", "actor_update"]


def synth(path: Path, n: int, rank: int = 0) -> None:
    rng = random.Random(rank)
    events = []
    t = 5.0e12
    for i in range(n):
        if i % 1000 == 0:  # a verl stage every 1,000 events, with a micro batch inside
            events.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": STAGES[(i // 1000) % 3],
                    "pid": 100,
                    "tid": 100,
                    "ts": t,
                    "dur": 2000.0,
                    "args": {"External id": i, "Record function id": 0, "Ev Idx": i},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": "micro_batch0",
                    "pid": 100,
                    "tid": 100,
                    "ts": t + 1,
                    "dur": 900.0,
                    "args": {"External id": i + 1, "Record function id": 0, "Ev Idx": i + 1},
                }
            )
        dur = rng.uniform(0.5, 2.0)
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm" if i % 7 else "gloo:all_reduce",
                "pid": 100,
                "tid": 100,
                "ts": t,
                "dur": dur,
                "args": {
                    "External id": i,
                    "Record function id": 0,
                    "Sequence number": i,
                    "Fwd thread id": 0,
                    "Ev Idx": i,
                },
            }
        )
        t += 2.0
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [],
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 1},
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1790000000000000000,
        "traceEvents": events,
        "traceName": str(path),
    }
    path.write_text(json.dumps(doc))


CHILD = r"""
import json, sys, time
def _hwm_mb():
    # VmHWM belongs to this process image (ru_maxrss would carry the forking parent's peak across exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024

from pathlib import Path
from rl_insight.analysis.load import load
import pandas  # noqa: F401  (imported before t0, as upstream's child imports its parser, and pandas, before t0)
t0 = time.perf_counter()
loaded = load([Path(sys.argv[1])], detail=tuple(sys.argv[2].split(",")))
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "rows": len(loaded.events), "rss_mb": _hwm_mb()}))
"""

UPSTREAM = r"""
import json, sys, time
def _hwm_mb():
    # VmHWM belongs to this process image (ru_maxrss would carry the forking parent's peak across exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024

from pathlib import Path
gz = Path(sys.argv[1])
from recipe.parser.torch_parser import TorchClusterParser  # upstream 0.3.0 ("recipe")
t0 = time.perf_counter()
p = TorchClusterParser({"rank_list": "all"})
rows = p.parse_analysis_data(str(gz), -1, "actor_update")
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "rows": len(rows), "rss_mb": _hwm_mb()}))
"""


def run(python: str, code: str, *args: str) -> dict:
    out = subprocess.run([python, "-c", code, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def wall(argv: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    dt = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed: {out.stderr[-2000:]}")
    return dt


def end_to_end(upstream: str, root: Path, rounds: int) -> None:
    """The two command lines on the same directory, interleaved so the machine's noise hits both alike."""
    cli = [sys.executable, "-m", "rl_insight"]
    runs = {
        "upstream recipe (HTML timeline)": [
            upstream,
            "-m",
            "recipe.main",
            f"input.path={root}",
            "timeline.parser.type=torch",
            f"output.path={root.parent / 'out-upstream'}",
        ],
        "rl-insight analyze --format html": [
            *cli,
            "analyze",
            str(root),
            "--out",
            str(root.parent / "out-html"),
            "--format",
            "html",
        ],
        "rl-insight analyze (default formats)": [*cli, "analyze", str(root), "--out", str(root.parent / "out-all")],
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(rounds):
        for name, argv in runs.items():
            times[name].append(wall(argv, root.parent))
    base = statistics.median(times["upstream recipe (HTML timeline)"])
    print(f"  end to end, median of {rounds} interleaved rounds (wall clock, fresh process each):")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"    {name}: {med:.2f} s (runs {', '.join(f'{t:.2f}' for t in ts)})  upstream/this = {base / med:.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--upstream", help="python of a venv with rl-insight[recipe]==0.3.0")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    d = Path(tempfile.mkdtemp(prefix="rl-analysis-bench-"))
    f = d / "actor_update" / "prof_rank-0_1_2.json"
    f.parent.mkdir()
    synth(f, args.events)
    print(f"  trace: {args.events:,} events, {f.stat().st_size / 2**20:.0f} MiB of JSON")
    gz = f.with_name(f.name + ".gz")
    with open(f, "rb") as src, gzip.open(gz, "wb", compresslevel=1) as dst:
        dst.write(src.read())
    print(f"  gzip'd: {gz.stat().st_size / 2**20:.0f} MiB")
    for path in (f, gz):
        for detail in ("annotations", "annotations,ops"):
            r = run(sys.executable, CHILD, str(path), detail)
            print(f"  rl-insight load({path.suffix}, detail={detail}): {r['seconds']:.2f} s, {r['rows']:,} rows, "
                  f"peak RSS {r['rss_mb']:.0f} MiB")
    if args.upstream:
        r = run(args.upstream, UPSTREAM, str(gz))
        print(
            f"  upstream 0.3.0 torch parser on the .json.gz (one row per file): {r['seconds']:.2f} s, {r['rows']} "
            "row(s), "
            f"peak RSS {r['rss_mb']:.0f} MiB"
        )
        f.unlink()  # the directory now holds only the .json.gz, upstream's recipe input
        end_to_end(args.upstream, f.parent, args.rounds)


if __name__ == "__main__":
    main()

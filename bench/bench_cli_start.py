"""How long the command line takes to start: `rl-insight --help` and a few commands' `--help`, each a fresh process,
this tree against a baseline checkout (a git worktree of another commit), interleaved round by round.

    python bench/bench_cli_start.py --baseline /tmp/base-worktree [--rounds 15]

Each round runs every command once on each side in alternating order; the result is the median wall time per command
and side, and their ratio. `python -c pass` is measured the same way (the interpreter's own start, which no change
here can save).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import machine

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = [["--help"], ["server", "start", "--help"], ["analyze", "--help"], ["stacks", "--help"]]


def once(tree: Path, args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rl_insight", *args], cwd=tree, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="a checkout of the commit to compare against")
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    sides = {"this tree": ROOT, "baseline": a.baseline.resolve()}
    times: dict[tuple[str, str], list[float]] = {}
    python_start = []
    for r in range(a.rounds):
        order = list(sides.items()) if r % 2 == 0 else list(reversed(sides.items()))
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        python_start.append(time.perf_counter() - t0)
        for args in COMMANDS:
            for side, tree in order:
                times.setdefault((" ".join(args), side), []).append(once(tree, args))
    print(f"# {machine()}; {a.rounds} rounds, interleaved; `python -c pass`: {statistics.median(python_start):.3f} s")
    print("| command | this tree | baseline | ratio |")
    print("|---|---|---|---|")
    for args in COMMANDS:
        cmd = " ".join(args)
        ours, base = statistics.median(times[(cmd, "this tree")]), statistics.median(times[(cmd, "baseline")])
        print(f"| `rl-insight {cmd}` | {ours:.3f} s | {base:.3f} s | {base / ours:.2f}× |")


if __name__ == "__main__":
    main()

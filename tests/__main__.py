"""The whole suite as the README and CI run it (`python -m tests [pytest options]`), in two passes:

1. everything but the browser tests on three pytest-xdist workers (modules kept whole on a worker, so a module's
   servers start once; the longest modules first, tests/lanes.py `heaviest_first`). Its tests wait on servers and
   processes more than they compute: on two cores, three workers took 831 s at 152 % CPU where two took 1,000 s
   (2026-12-07); four are not worth it, as the pass's CPU time alone (~1,270 CPU-s) is over ten minutes of both cores;
2. the browser tests (marker `e2e`) and the few timing-sensitive ones (marker `alone`) in one process, alone on the
   machine (on two workers the browser tests took 403 s instead of 520 s, green once; on three, 411 s with four
   failures, the `alone` ones among them: they stay in one process).

Why not one pass on the workers: a browser test waits for a page that draws under the load of its own server, demo
and Chromium; with another worker's servers beside them, those waits failed one run in two (a different one each
time), while alone they hold. Why not one serial pass: it took ~19 minutes on two cores, over the project's limit.

`--fast` runs one pass instead: the in-process lane (tests/lanes.py: no socket, no process, no outside service;
markers `socket`, `external` and `slow` (a test over 2 s) leave the rest out; a guard fails a test that opens a
socket or starts a process; hypothesis draws seeded and fewer) on two workers, as its tests now compute rather than
wait (four took longer): about a minute on two cores, for the edit-and-test loop.

The standard run leaves out the full lane (tests/full_lane.py: the costliest tests, each with a cheaper test of the
same real part in the standard run), so that it fits the project's 12 minutes on two cores; `--full` runs everything
(before a release, after a change to what those tests cover, on a schedule).

Options after `python -m tests` go to both passes (`-x`, `-k name`, a path); `--workers N` sets the first pass's
workers (`--workers 0`: no xdist). Plain `python -m pytest` still runs everything, serially. Exits non-zero when
either pass failed; a pass that selects no test (a path holding only one kind) is not a failure.

A run leaves the tree as it was: browser tests write their screenshots under test-artifacts/. `--docs-images` runs
the browser pass alone and lets the screenshots docs/ shows be written into docs/img/ (refreshed on purpose).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from tests.lanes import IN_PROCESS_LANE, LANE_ENV

NO_TESTS_COLLECTED = 5  # pytest's exit status for a selection that matched nothing
FAST_WORKERS = 2  # in process, the fast lane's tests compute: one worker per core (four: 1.5x the wall time)
SUITE_WORKERS = 3  # the first pass: its tests wait more than they compute (see 1. above)


def run(args: list[str], lane: str | None = None) -> int:
    """pytest with `args`; `lane`: the lane its workers guard (tests/lanes.py)."""
    print("\n$ python -m pytest " + " ".join(args), flush=True)
    env = {**os.environ, **({LANE_ENV: lane} if lane else {})}
    return subprocess.call([sys.executable, "-m", "pytest", *args], env=bytecode_kept(env))


def bytecode_kept(env: dict[str, str]) -> dict[str, str]:
    """Compiled modules kept between processes, outside the tree: with PYTHONDONTWRITEBYTECODE set (as on this
    project's machines) every worker, and every `python -m rl_insight` a test starts, compiled the package and
    pytest rewrote every test module from source again (a third of collecting the fast lane)."""
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.setdefault("PYTHONPYCACHEPREFIX", str(Path.home() / ".cache" / "rl-insight" / "pycache"))
    return env


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests", description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=SUITE_WORKERS,
                    help="pytest-xdist workers for the first pass (0: none)")
    ap.add_argument("--fast", action="store_true",
                    help="one pass of the tests that need no outside service (no Prometheus, PostgreSQL, Chromium, "
                         "haproxy, torch; no socket, no process): about a minute")
    ap.add_argument("--full", action="store_true",
                    help="the full lane too: the costliest tests, left out of the standard run (tests/full_lane.py)")
    ap.add_argument("--docs-images", action="store_true",
                    help="the browser pass only, writing the screenshots docs/ shows into docs/img/")
    known, passthrough = ap.parse_known_args(argv)
    if known.docs_images:
        os.environ["RL_INSIGHT_DOCS_IMAGES"] = "1"  # (tests/e2e/test_ui.py: doc_image)
        return run(["-q", "-m", "e2e", *passthrough])
    if known.fast:
        where = [] if any(not a.startswith("-") for a in passthrough) else ["tests/unit"]  # (the other folders hold
        # only external tests: not even imported)
        return run(["-q", "-n", str(FAST_WORKERS), "--dist", "load", "-m", "not socket and not slow", *where,
                    *passthrough],
                   lane=IN_PROCESS_LANE)
    spread = ["-n", str(known.workers), "--dist", "loadscope"] if known.workers > 0 else []
    lane = "" if known.full else " and not full"  # (tests/full_lane.py)
    results = [run(["-q", *spread, "-m", f"not e2e and not alone{lane}", *passthrough]),
               run(["-q", "-m", f"(e2e or alone){lane}", *passthrough])]
    if all(r == NO_TESTS_COLLECTED for r in results):
        return NO_TESTS_COLLECTED
    return max((r for r in results if r != NO_TESTS_COLLECTED), default=0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

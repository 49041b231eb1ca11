"""How long the in-process fast lane takes (`python -m tests --fast`): run twice, the second with the compiled modules
the first kept (tests/__main__.py `bytecode_kept`), wall and CPU time of each (the tests' processes included).

    python bench/bench_test_lanes.py
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._util import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    print(f"machine: {machine()}")
    for name in ("first", "second"):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "tests", "--fast", "-p", "no:cacheprovider"], cwd=ROOT,
                           capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        summary = next((line for line in reversed(r.stdout.splitlines()) if "passed" in line or "failed" in line), "")
        print(f"{name} run: {wall:.0f} s wall, {cpu:.0f} s CPU; {summary.strip()}")


if __name__ == "__main__":
    main()

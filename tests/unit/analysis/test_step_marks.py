"""Steps from a trace's own step ranges (a file that spans several steps): torch.profiler's ProfilerStep#N
from a real CPU trace, and verl-style `step N` ranges; the file name's step always wins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rl_insight.analysis import analyze as an
from rl_insight.analysis.load import load

SCRIPT = r'''
import sys, time, torch
sched = torch.profiler.schedule(wait=1, warmup=0, active=3)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                            on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as prof:
    for step in range(4):                       # step 0 is waited out; 1..3 are recorded
        with torch.profiler.record_function("actor_update"):
            time.sleep(0.02 * step)             # step N's update lasts about 20*N ms
            torch.ones(64, 64) @ torch.ones(64, 64)
        prof.step()
'''


def _torch() -> None:
    try:
        import torch  # noqa: F401 - whether it imports is the question
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("torch missing in CI")
        pytest.skip("torch not installed")


def test_profiler_steps_of_a_real_trace_key_the_per_step_analyses(tmp_path: Path) -> None:
    _torch()
    # verl's name without a step (one file for every profiled step)
    out = tmp_path / "actor-rollout-ref_e2e_rank0-of-1_pid7_20261130120000123.json.gz"
    (tmp_path / "make.py").write_text(SCRIPT)
    subprocess.run([sys.executable, str(tmp_path / "make.py"), str(out)], check=True, capture_output=True, timeout=300)
    loaded = load([tmp_path], workers=1)
    ev = loaded.events
    updates = ev[ev["name"] == "actor_update"]
    assert sorted(int(s) for s in updates["step"]) == [1, 2, 3]
    assert not ev["name"].astype(str).str.startswith("ProfilerStep#").any()  # marks set steps; they are not stages
    by_step = {r["step"]: r["states"]["actor_update"] for r in an.step_breakdown(ev)}
    assert sorted(by_step) == [1, 2, 3]
    # the slept durations: each step's actor_update in its own step, never mixed up by order
    assert by_step[1] < by_step[2] < by_step[3]
    assert 0.015 <= by_step[1] < 0.2 and 0.055 <= by_step[3] < 0.3


def _trace(path: Path, events: list[dict], memory: list[dict] = ()) -> None:
    path.write_text(json.dumps({"baseTimeNanoseconds": 1_790_000_000_000_000_000, "traceEvents": [
        *({"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1, "args": {}, **e} for e in events),
        *({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "s": "t",
           "args": {"Total Allocated": m["bytes"], "Total Reserved": m["bytes"], "Device Type": 1, "Device Id": 0},
           "ts": m["ts"]} for m in memory)]}))


def test_named_step_ranges_nest_and_memory_follows(tmp_path: Path) -> None:
    d = tmp_path / "actor"
    d.mkdir()
    _trace(d / "prof_rank-0_1_2.json", [
        {"name": "global_step:7", "ts": 0.0, "dur": 1000.0},
        {"name": "actor_update", "ts": 100.0, "dur": 300.0},
        {"name": "step 8", "ts": 2000.0, "dur": 1000.0},
        {"name": "ProfilerStep#99", "ts": 2500.0, "dur": 100.0},   # nested: the innermost mark wins
        {"name": "actor_update", "ts": 2550.0, "dur": 10.0},
        {"name": "actor_update", "ts": 2700.0, "dur": 10.0},        # after the inner mark ended: step 8
        {"name": "save_checkpoint", "ts": 5000.0, "dur": 10.0},     # outside every mark: no step
    ], memory=[{"ts": 150.0, "bytes": 10}, {"ts": 2100.0, "bytes": 20}, {"ts": 9000.0, "bytes": 30}])
    loaded = load([tmp_path], workers=1)
    got = sorted((str(n), _step(s)) for n, s in zip(loaded.events["name"], loaded.events["step"]))
    assert got == sorted([("actor_update", 7), ("actor_update", 99), ("actor_update", 8), ("save_checkpoint", -1)])
    assert [_step(s) for s in loaded.memory.sort_values("ts_ns")["step"]] == [7, 8, -1]


def _step(s: object) -> int:
    return -1 if pd.isna(s) else int(s)


def test_the_file_names_step_is_never_overridden(tmp_path: Path) -> None:
    _trace(tmp_path / "actor-rollout-ref_e2e_step3_rank0-of-1_pid7_20261130120000123.json",
           [{"name": "step 8", "ts": 0.0, "dur": 100.0}, {"name": "actor_update", "ts": 10.0, "dur": 10.0}])
    loaded = load([tmp_path], workers=1)
    assert set(int(s) for s in loaded.events["step"]) == {3}

"""Memory over time: torch.profiler's profile_memory events (a real CPU trace) and verl's torch_memory
snapshots (the `torch.cuda.memory._snapshot()` format, built by hand), peaks per lane and per stage."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from rl_insight.analysis import analyze as an
from rl_insight.analysis.load import detect, load

SCRIPT = r'''
import sys, torch
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
    with torch.profiler.record_function("ref_compute_log_prob"):
        small = torch.ones(256, 256)          # 256 KiB
    with torch.profiler.record_function("actor_update"):
        big = torch.ones(2048, 1024)          # 8 MiB
        del big
prof.export_chrome_trace(sys.argv[1])
'''
NAME = "actor-rollout-ref_e2e_step4_rank0-of-2_pid77_20261130120000123"


def test_profile_memory_events_of_a_real_trace_give_peaks_per_stage(tmp_path: Path) -> None:
    try:
        import torch  # noqa: F401 - whether it imports is the question
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("torch missing in CI")
        pytest.skip("torch not installed")
    out = tmp_path / f"{NAME}.json.gz"
    script = tmp_path / "make.py"
    script.write_text(SCRIPT)
    subprocess.run([sys.executable, str(script), str(out)], check=True, capture_output=True, timeout=300)
    loaded = load([tmp_path], workers=1)
    mem = loaded.memory
    assert not mem.empty and set(mem["lane"]) == {"actor_rollout_ref/rank0"} and set(mem["step"]) == {4}
    result = an.memory(loaded.events, mem)
    stage = {r["stage"]: r["peak_allocated_bytes"] for r in result["stages"]}
    assert stage["actor_update"] >= 8 * 2**20  # the 8 MiB tensor lived inside actor_update
    assert stage["ref_compute_log_prob"] < 8 * 2**20 <= result["lanes"][0]["peak_allocated_bytes"]


def _snapshot(t0_us: int) -> dict:
    mib = 2**20
    trace = [
        {"action": "segment_alloc", "addr": 1, "size": 20 * mib, "stream": 0, "time_us": t0_us},
        {"action": "alloc", "addr": 1, "size": 4 * mib, "stream": 0, "time_us": t0_us + 10},
        {"action": "alloc", "addr": 2, "size": 10 * mib, "stream": 0, "time_us": t0_us + 2_000},   # inside actor_update
        {"action": "free_requested", "addr": 2, "size": 10 * mib, "stream": 0, "time_us": t0_us + 3_000},
        {"action": "free_completed", "addr": 2, "size": 10 * mib, "stream": 0, "time_us": t0_us + 3_100},
    ]
    # at snapshot time: one 20 MiB segment with 4 MiB (+1 MiB held before recording began) allocated
    return {
        "segments": [{"device": 0, "total_size": 20 * mib, "allocated_size": 5 * mib, "blocks": []}],
        "device_traces": [trace],
    }


def test_torch_memory_snapshot_pickle_is_read_safely_and_anchored(tmp_path: Path) -> None:
    t0_us = 1_790_000_000_000_000
    f = tmp_path / f"{NAME}.pickle"
    f.write_bytes(pickle.dumps(_snapshot(t0_us)))
    assert detect(f) == "torch-memory"
    loaded = load([f])
    mem = loaded.memory
    assert list(mem["allocated_bytes"] / 2**20) == [1, 5, 15, 5]  # anchored: 1 MiB was held before the trace began
    assert list(mem["reserved_bytes"] / 2**20) == [20, 20, 20, 20]
    assert set(mem["device"]) == {"cuda:0"} and set(mem["lane"]) == {"actor_rollout_ref/rank0"}
    lanes = an.memory(loaded.events, mem)["lanes"]
    assert lanes[0]["peak_allocated_bytes"] == 15 * 2**20 and lanes[0]["peak_at_ns"] == (t0_us + 2_000) * 1000


def test_a_pickle_that_would_run_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    f = tmp_path / "torch_memory_rank0.pickle"
    f.write_bytes(pickle.dumps({"device_traces": [Evil()]}))
    loaded = load([f])
    assert not marker.exists()
    assert any("refusing to load" in e for e in loaded.report.errors)

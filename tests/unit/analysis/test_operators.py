"""The profile report's operator and kernel tables (issue 49 item 17) against torch's own `key_averages()` on a real
torch.profiler trace: the same call counts, self times that agree and add up, memory per operator where the trace
has it, communication told from compute."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pandas")

from rl_insight.analysis.analyze import summarize  # noqa: E402 - after the importorskip
from rl_insight.analysis.load import load  # noqa: E402
from rl_insight.analysis.operators import _self_times, is_comm  # noqa: E402


@pytest.fixture
def torch() -> Any:
    """torch, imported by the tests that use it (at collection, every pytest process paid 4 s for it)."""
    return pytest.importorskip("torch")


def test_self_time_is_the_span_minus_direct_children() -> None:
    # a [0,100) with children [10,30) and [40,90), the latter with a child [50,60)
    assert _self_times([0, 10, 40, 50], [100, 30, 90, 60]) == [30, 20, 40, 10]
    assert sum(_self_times([0, 10, 40, 50], [100, 30, 90, 60])) == 100  # adds up to the covered time
    # an operator entered again inside itself is one call (torch counts it once): its child belongs to the outer one
    assert _self_times([0, 5, 10], [100, 95, 20], ["aten::mean", "aten::mean", "aten::sum"]) == [90, None, 10]


def test_operator_tables_agree_with_torch_key_averages(tmp_path: Path, torch: Any) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        with torch.profiler.record_function("actor_update"):
            for _ in range(5):
                loss = model(torch.randn(128, 256)).pow(2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
    trace = tmp_path / "rank0.pt.trace.json"
    prof.export_chrome_trace(str(trace))
    loaded = load([trace], workers=1, detail=("annotations", "ops", "kernels"))
    result = summarize(loaded.events, loaded.metrics, loaded.memory)
    ops = result["operators"]["operators"]
    assert ops and ops == sorted(ops, key=lambda r: -r["self_s"])  # by self time, largest first
    theirs = {e.key: e for e in prof.key_averages()}
    for row in ops:
        ref = theirs.get(row["name"])
        if ref is None:
            continue
        assert row["calls"] == ref.count, row["name"]
        assert row["self_s"] <= row["total_s"] + 1e-9
        # torch's self time is computed from the same events: agree within 2 % or 20 µs
        assert abs(row["self_s"] - ref.self_cpu_time_total / 1e6) <= max(0.02 * row["self_s"], 20e-6), row["name"]
    names = {r["name"] for r in ops}
    assert {"aten::addmm", "aten::mm"} & names  # the matrix products are there
    totals = result["operators"]["totals"]["operators"]
    assert totals["self_s"] <= result["window"]["seconds"] + 1e-6  # self times never count a moment twice
    assert any(r["peak_allocated_bytes"] for r in ops)  # profile_memory: memory by operator
    assert is_comm("nccl:all_reduce", "op") and is_comm("ncclKernel_AllReduce_RING", "kernel")
    assert not is_comm("aten::addmm", "op")

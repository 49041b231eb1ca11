"""Offline explain (issue 25): each step's critical path and what-if savings from the event table, and
`analyze A --compare B` — the same pure implementations as the server, on hand-built tables and on real torch
traces through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rl_insight.analysis import explain
from rl_insight.analysis.analyze import summarize
from rl_insight.analysis.render import html
from rl_insight.analysis.table import Columns, with_depth

MS = 1_000_000


def table(slow_replica_ms: int):
    c = Columns()
    for step in (1, 2, 3):
        t = (step - 1) * 2000 * MS
        for r in range(3):
            d = slow_replica_ms if r == 2 else 300
            c.add("torch", "rollout", None, f"rollout/replica_{r}", "vllm_generate", "annotation", t, t + d * MS, step,
                  None, "f")
        end = t + max(300, slow_replica_ms) * MS
        for rank in range(2):
            c.add("torch", "actor", rank, f"actor/rank{rank}", "actor_update", "annotation", end + 20 * MS,
                  end + (520 - 10 * rank) * MS, step, None, "f")  # rank 0 ends last
    return with_depth(c.frame())


def test_step_facts_and_the_compare_name_the_slow_replica(tmp_path: Path) -> None:
    base, slow = explain.step_facts(table(300)), explain.step_facts(table(900))
    assert sorted(slow) == [1, 2, 3]
    path = slow[2]["path"]
    assert [(e["lane"], e["name"]) for e in path["elements"]] == [("rollout/replica_2", "vllm_generate"),
                                                                  ("actor/rank0", "actor_update")]
    assert path["bubbles_s"] == pytest.approx(0.02)
    assert slow[2]["whatif"]["tail"] == pytest.approx(0.6)  # replica_2 finishing with the others: 900 → 300 ms
    d = explain.compare(base, slow, ("base", "slow"))
    assert d["aligned_steps"] == 3 and list(d["by_stage"].items())[0] == ("vllm_generate", pytest.approx(0.6))
    assert d["lanes"][0]["lane"] == "rollout/replica_2"
    assert "rollout/replica_2" in d["sentence"] and "vllm_generate" in d["sentence"], d["sentence"]
    assert "the long-tail replica finishing with the others, about 0.60 s a step" in d["sentence"]
    # the report: a critical-path table and the comparison, the sentence as its title
    df = table(900)
    result = summarize(df)
    result["critical_path"] = explain.critical_paths(slow)
    result["compare"] = d
    page = html.render(df, tmp_path / "t.html", "t", result=result).read_text()
    data = json.loads(page.split('<script id="data" type="application/json">')[1].split("</script>")[0])
    ids = {t["id"]: t for t in data["tables"]}
    assert ids["critical-path"]["rows"][1]["cells"][2].startswith("vllm_generate rollout/replica_2 0.900")
    assert ids["compare"]["title"].startswith("Compared: slow's steps are") and ids["compare"]["rows"]


def test_analyze_compare_on_real_torch_traces(torch_traces: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "rl_insight", "analyze", str(torch_traces / "flat"), "--compare",
                        str(torch_traces / "flat"), "--out", str(out), "--format", "html,summary"],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "about as long as" in r.stdout  # the same traces twice: no change
    summary = json.loads((out / "summary.json").read_text())
    assert summary["compare"]["aligned_steps"] >= 1 and summary["critical_path"]
    p = summary["critical_path"][0]
    assert p["chain"] and sum(x[2] for x in p["chain"]) + p["bubbles_s"] == pytest.approx(p["duration_s"], rel=1e-6)
    r = subprocess.run([sys.executable, "-m", "rl_insight", "analyze", str(torch_traces / "flat"), "--compare",
                        str(tmp_path / "nothing"), "--out", str(out)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 2 and "nothing to compare" in r.stderr, r.stderr

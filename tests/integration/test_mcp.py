"""`rl-insight mcp` through the `mcp` package's own client over stdio (issue 51 item 6): the tools an agent gets, the
answers they give on real runs of a real server (the same reads, the same token), bounded, and errors said."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from rl_insight.cli.mcp_server import MAX_ANSWER_CHARS, bounded
from rl_insight.server.rooms.stacks.feature import stacks_of
from tests.conftest import start_server
from tests.unit.server.routes.test_read_results import _steps_of_a_run

TOKEN = "mcp-test-token"


def test_an_answer_is_cut_and_says_so() -> None:
    text = bounded([{"lane": f"rank_{i}", "where": "x" * 50} for i in range(2000)])
    assert len(text) < MAX_ANSWER_CHARS + 100 and text.endswith("more characters; ask narrower")
    assert json.loads(bounded({"a": 1})) == {"a": 1}


async def _ask(url: str, calls: list[tuple[str, dict[str, Any]]], token: str = TOKEN) -> tuple[list[str], list[Any]]:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "rl_insight", "mcp", "--server-url", url,
                                                                 "--token", token])
    async with Client(params) as client:
        tools = [t.name for t in (await client.list_tools()).tools]
        results = [await client.call_tool(name, args) for name, args in calls]
    return tools, results


def test_the_agent_reads_runs_verdicts_stacks_paths_and_diffs(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    srv = start_server(tmp_path, token=TOKEN)
    try:
        h = {"Authorization": f"Bearer {TOKEN}"}
        _steps_of_a_run(srv.url, "q", "base", headers=h)
        _steps_of_a_run(srv.url, "q", "slow", slow_lane="replica_1", headers=h)
        srv.app.state.st.writer.flush(10)
        ids = {r["experiment_name"]: r["id"] for r in httpx.get(srv.url + "/api/v1/runs", headers=h).json()["runs"]}
        snap = httpx.post(f"{srv.url}/api/v1/runs/{ids['slow']}/stacks", json={"deadline_s": 1}, headers=h).json()
        stacks_of(srv.app.state.st).tick(time.time() + 5)  # nobody answers: complete at its deadline, with a verdict
        tools, (runs, verdict, groups, path, diff, missing, found) = asyncio.run(_ask(srv.url, [
            ("runs", {"project": "q"}), ("verdict", {"run": "q/slow"}), ("stack_groups", {"run": str(ids["slow"])}),
            ("explain_step", {"run": "q/slow"}), ("run_diff", {"a": "q/base", "b": "q/slow"}),
            ("verdict", {"run": "q/nothing"}), ("findings", {"run": "q/slow", "kind": "hang"})]))
        assert sorted(tools) == ["explain_step", "findings", "run_diff", "runs", "stack_groups", "verdict"]
        text = lambda r: r.content[0].text  # noqa: E731
        assert {r["experiment_name"] for r in json.loads(text(runs))} == {"base", "slow"}
        answer = json.loads(text(verdict))
        assert answer["run_id"] == ids["slow"] and answer["snapshot"]["id"] == snap["id"]
        # the run's one process holds step 6's train_batch and did not answer (it is a test, not a job)
        assert (answer["verdict"]["class"], answer["verdict"]["culprits"]) == ("unresponsive", ["rank_0"])
        brief = json.loads(text(groups))
        assert brief["id"] == snap["id"] and brief["groups"][0]["answered"] is False
        case = json.loads(text(path))  # the step's critical path, its sentence first, seconds not nanoseconds
        assert next(iter(case)) == "sentence" and case["sentence"].startswith(f"step {case['step']} took ")
        assert case["path"] and set(case["path"][0]) == {"lane", "state", "seconds", "slack_s"}
        d = json.loads(text(diff))
        assert next(iter(d)) == "sentence" and d["aligned_steps"] >= 3 and "steps" not in d and d["steps_total"] >= 3
        assert missing.is_error and "no run q/nothing" in text(missing)
        hang = json.loads(text(found))["findings"]  # the verdict, as a finding of kind hang
        assert [(f["kind"], f["subject"], f["cause"]) for f in hang] == [("hang", "rank_0", "unresponsive")]
    finally:
        srv.stop()


def test_a_long_diff_keeps_its_conclusion_and_pages_its_steps() -> None:
    """Issue 64: past ~40 steps the per-step array came first and the 16,000-character cut removed the sentence.
    The conclusion leads; the steps come only when asked, a page at a time."""
    from rl_insight.cli.mcp_server import diff_case

    steps = [{"step": i, "a_s": 5.0, "b_s": 6.0, "delta_s": 1.0, "stages": {f"stage_{k}": 0.1 for k in range(12)}}
             for i in range(1, 401)]
    answer = {"a": 1, "b": 2, "names": ["q/base", "q/slow"], "aligned_steps": 400, "steps": steps,
              "by_stage": {"generation": 1.0}, "by_class": {"rollout replicas": 1.0}, "lanes": [],
              "sentence": "B's steps took 1.00 s longer (+20 %): generation; replica_1 the most.",
              "pending_steps": {}, "savings_b": {}, "ledger": {}}
    assert "B's steps took" not in bounded(answer)  # (what happened before: the sentence cut off)
    short = json.loads(bounded(diff_case(answer, per_step=False, offset=0, limit=50)))
    assert short["sentence"].startswith("B's steps took") and short["steps_total"] == 400 and "steps" not in short
    pages, offset = [], 0
    while offset is not None:
        text = bounded(diff_case(answer, per_step=True, offset=offset, limit=50))
        assert text.startswith('{"sentence":"B\'s steps took') and "ask narrower" not in text
        page = json.loads(text)
        pages += page["steps"]
        offset = page["next_offset"]
    assert [s["step"] for s in pages] == list(range(1, 401))


def test_an_agent_with_a_project_token_sees_that_project_only(tmp_path: Path) -> None:
    """Issue 54: the tools read with the token they are given: a viewer token of project q lists q's runs only, and a
    run of another project is, to it, a run that does not exist."""
    pytest.importorskip("mcp")
    srv = start_server(tmp_path, token=TOKEN)
    try:
        h = {"Authorization": f"Bearer {TOKEN}"}
        _steps_of_a_run(srv.url, "q", "base", headers=h)
        _steps_of_a_run(srv.url, "secret-team", "theirs", headers=h)
        srv.app.state.st.writer.flush(10)
        other = next(r["id"] for r in httpx.get(srv.url + "/api/v1/runs", headers=h).json()["runs"]
                     if r["project"] == "secret-team")
        viewer = httpx.post(srv.url + "/api/v1/tokens", json={"name": "agent", "role": "viewer", "projects": ["q"]},
                            headers=h).json()["token"]
        _, (runs, theirs) = asyncio.run(_ask(srv.url, [("runs", {}), ("verdict", {"run": str(other)})], viewer))
        assert [r["project"] for r in json.loads(runs.content[0].text)] == ["q"]
        assert theirs.is_error and f"no run with id {other}" in theirs.content[0].text
        assert "secret-team" not in theirs.content[0].text
    finally:
        srv.stop()

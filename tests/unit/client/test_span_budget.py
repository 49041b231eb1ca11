"""The per-process span budget (issue 24, item 6): turn detail is kept or left out by whole trajectories, state
lanes and session records always go out, what was left out is counted; end to end against a real server the run
still counts every trajectory (from the session record) and the client reports what it sampled out."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

import rl_insight
from rl_insight import agent_loop_session
from rl_insight.client.span_budget import SpanBudget, budget_from
from tests.conftest import start_server, wait_until


def turn(traj: int, step: int = 1, source: str = "gateway") -> dict:
    return {"monitor.trace_source": source, "state_lane_id": f"experiment=e/sample=0/session=s/traj={traj}",
            "global_steps": step}


def test_whole_trajectories_are_kept_or_left_out() -> None:
    b = SpanBudget(4)
    kept = {t: [b.keep(turn(t)) for _ in range(3)] for t in range(4)}  # 4 trajectories of 3 turns each
    assert kept[0] == kept[1] == [True] * 3  # the second started within the budget: kept whole (6 > 4)
    assert kept[2] == kept[3] == [False] * 3  # started past it: left out whole
    assert b.keep(turn(0)) is True  # a kept trajectory's later turn follows its first
    assert (b.turns_out, b.trajectories_out) == (6, 2)
    assert b.keep({"state_lane_id": "rank_0"}) is True  # not turn detail: always
    assert b.keep({**turn(9), "monitor.trace_source": "session"}) is True
    assert b.keep(turn(5, step=2)) is True  # a new step has its own budget
    assert budget_from("") is None and budget_from("0") is None and budget_from("x") is None
    assert budget_from(" 12 ".strip()).per_step == 12  # type: ignore[union-attr]


def test_without_global_steps_the_budget_follows_the_process_step_or_a_time_window(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49 item 13: turns with no `global_steps` all counted against one step forever, so every round after the
    first lost all its turn detail."""
    from rl_insight.client import span_budget

    step = [1]
    b = SpanBudget(2, lambda: step[0])
    untagged = [{**turn(t), "global_steps": None} for t in range(6)]
    for t in untagged:
        t.pop("global_steps")
    assert [b.keep(untagged[t]) for t in range(3)] == [True, True, False]  # step 1's budget: 2 turns
    step[0] = 2
    assert [b.keep(untagged[t]) for t in range(3, 6)] == [True, True, False]  # the next round has its own
    clock = [0.0]
    monkeypatch.setattr(span_budget.time, "monotonic", lambda: clock[0])
    unknown = SpanBudget(1, lambda: None)  # no step at all: a window of WINDOW_S seconds
    assert [unknown.keep({**untagged[t], "state_lane_id": f"w{t}"}) for t in range(2)] == [True, False]
    clock[0] = span_budget.WINDOW_S + 1
    assert unknown.keep({**untagged[0], "state_lane_id": "w9"}) is True


def test_a_job_that_numbers_every_round_alike_is_decided_afresh_each_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 64: an agent loop with no `global_steps` and no step metric numbers its samples and trajectories the same
    way every round, so its lanes repeat; each lane's first-round decision held forever (the trajectories left out
    in round 1 were left out in every later round). A decision now lasts while its trajectory does: until its
    session's record, or until a known step moves on."""
    from rl_insight.client import span_budget

    clock = [0.0]
    monkeypatch.setattr(span_budget.time, "monotonic", lambda: clock[0])
    b = SpanBudget(2, lambda: None)  # no step known at all: windows

    def untagged(t: int, source: str = "gateway") -> dict:
        a = {**turn(t), "monitor.trace_source": source}
        a.pop("global_steps")
        return a

    for rnd, order in enumerate(([0, 1, 2, 3], [3, 2, 1, 0])):
        clock[0] = rnd * (span_budget.WINDOW_S + 1)  # the next round in the next window
        kept = {t: b.keep(untagged(t)) for t in order}
        assert kept == {order[0]: True, order[1]: True, order[2]: False, order[3]: False}, (rnd, kept)
        assert b.keep(untagged(0, "session")) is True  # the session ends: its record always goes out
    step = [7]
    by_step = SpanBudget(1, lambda: step[0])  # a known step: a new step decides afresh even without a session end
    assert [by_step.keep(turn(t) | {"global_steps": None}) for t in (0, 1)] == [True, False]
    step[0] = 8
    assert [by_step.keep(turn(t) | {"global_steps": None}) for t in (1, 0)] == [True, False]


def test_a_run_counts_every_trajectory_and_the_client_says_what_it_left_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    srv = start_server(tmp_path)
    try:
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", srv.url)
        monkeypatch.setenv("RL_INSIGHT_SPAN_BUDGET", "4")
        rl_insight.init("agents", "budget")
        rl_insight.metric_gauge("training/global_step", 1, step=1)
        s = agent_loop_session(project="agents", experiment_name="budget", sample=0, session="s", global_steps=1)
        t0 = time.time_ns()
        for traj in range(5):
            for k in range(2):
                a = t0 + (traj * 10 + k * 3) * 10**6
                s.generation(traj=traj, turn=k, start_time_ns=a, end_time_ns=a + 2 * 10**6, prompt_tokens=10,
                             completion_tokens=5, replica="replica_0")
        s.finish(trajectories=[{"chain_id": t + 1, "reward_score": t / 10, "num_turns": 2} for t in range(5)],
                 status="success")
        with rl_insight.trace_state("train_batch", state_lane_id="rank_0"):
            pass
        assert rl_insight.flush(10)
        srv.app.state.st.writer.flush(10)
        rid = httpx.get(srv.url + "/api/v1/runs").json()["runs"][0]["id"]
        trajs = wait_until(lambda: (t := httpx.get(f"{srv.url}/api/v1/runs/{rid}/trajectories",
                                                   params={"step": 1}).json()["trajectories"]) and len(t) == 5 and t,
                           what="every trajectory of the step")
        with_turns = sorted(t["turns"] for t in trajs)
        assert with_turns == [0, 0, 0, 2, 2]  # two kept whole, three left out whole (never one of two turns)
        lanes = {x["lane"] for x in httpx.get(f"{srv.url}/api/v1/runs/{rid}/lanes").json()["lanes"]}
        assert "rank_0" in lanes  # the state lane is always there
        text = httpx.get(srv.url + "/metrics").text
        assert re.search(r'^rl_insight_client_turns_sampled_out_total\{[^}]*\} 6\.0$', text, re.M), text[-2000:]
        assert re.search(r'^rl_insight_client_trajectories_sampled_out_total\{[^}]*\} 3\.0$', text, re.M)
    finally:
        rl_insight.finish(timeout=2)
        srv.stop()

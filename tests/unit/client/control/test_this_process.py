"""This process as every kind of control request sees it (client/control/this_process.py)."""

from __future__ import annotations

import pytest

from rl_insight.client.control import this_process
from rl_insight.client.control.this_process import ThisProcess
from rl_insight.protocol import RunControl, StackRequest


def test_identity_from_lanes_environment_and_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("RL_INSIGHT_RANK", "5")
    monkeypatch.setenv("RL_INSIGHT_ROLE", "critic")
    me = ThisProcess("node1", 42, lambda: None)
    me.note_lane("actor/rank_5")
    assert me.rank() == 5 and me.roles() == {"actor", "critic"}
    assert me.describe() == {"host": "node1", "pid": 42, "rank": 5, "lanes": ["actor/rank_5"],
                             "roles": ["actor", "critic"]}
    assert me.selected_by(StackRequest("ab", roles=("critic",))) and me.selected_by(StackRequest("ab", ranks=(5,)))
    assert not me.selected_by(StackRequest("ab", lanes=("rollout/replica_0",)))


def test_lanes_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(this_process, "MAX_PROCESS_LANES", 3)
    me = ThisProcess("h", 1, lambda: None)
    for i in range(10):
        me.note_lane(f"trajectory/{i}")
    assert me.lanes == {"trajectory/0", "trajectory/1", "trajectory/2"}


def test_its_own_step_wins_over_the_runs_clock() -> None:
    own: list[float | None] = [None]
    me = ThisProcess("h", 1, lambda: own[0])
    assert me.step() is None
    me.hear(RunControl([], 12, 1.7e9))  # a reply with the run's clock
    assert me.step() == 12 and me.run_step_at == 1.7e9
    me.hear(RunControl([]))  # a reply without one changes nothing
    assert me.step() == 12
    own[0] = 30.0  # once it logs its own step, that is where it is
    assert me.step() == 30

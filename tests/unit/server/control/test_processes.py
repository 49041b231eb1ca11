"""A run's live processes as every kind of control request picks and names them (server/control/processes.py)."""

from __future__ import annotations

from rl_insight.protocol.control import Selector
from rl_insight.server.control import processes as sg
from rl_insight.server.control.processes import picked, refusal

LIVE = [{"host": "n1", "pid": 1, "rank": None, "lanes": ["rollout/replica_0", "rollout/replica_1"]},
        {"host": "n1", "pid": 2, "rank": None, "lanes": ["actor/rank_0"]}]


def test_a_selector_picks_live_processes_by_lane_role_or_rank() -> None:
    assert [p["pid"] for p in LIVE if picked(Selector(), p)] == [1, 2]  # no selector: every process
    assert [p["pid"] for p in LIVE if picked(Selector(roles=("actor",)), p)] == [2]  # a role is a lane's prefix
    assert [p["pid"] for p in LIVE if picked(Selector(lanes=("rollout/replica_1",)), p)] == [1]
    assert not any(picked(Selector(ranks=(0,)), p) for p in LIVE)  # these processes report no rank


def test_a_refusal_says_what_the_run_has_and_that_its_ranks_are_lanes() -> None:
    text = refusal("p", "e", LIVE, Selector(ranks=(0, 1)))
    assert text.startswith("no live process of run p/e matches ranks 0, 1; it has 2 live processes, none reports a "
                           "rank, lanes actor/rank_0, rollout/replica_0-1 (roles actor, rollout)")
    assert text.endswith("the ranks here are lanes: choose them with --lanes (rank_0, rank_1)")


def test_compact_ranges() -> None:
    labels = [f"rank_{i}" for i in range(1024) if i != 512]
    assert sg.compact(labels) == "rank_0-511, rank_513-1023"
    assert sg.compact(["replica_10", "replica_2", "replica_3", "driver"]) == "replica_2-3, replica_10, driver"
    assert sg.compact(["rank 3", "rank 1", "rank 2"]) == "rank 1-3"
    many = sg.compact(f"p{i}_x" for i in range(40))  # no trailing number: listed, then cut
    assert many.endswith("and 28 more")

"""A stalled or hung run reads the same through every server of a fleet (server/live/run_conditions.py `share`): the
lease holder, which alone runs the insight refreshes and the stall watch, stores its conditions; the others take them.
Two servers' conditions on one real PostgreSQL store, each with its own document handle, as state.py wires them."""

from __future__ import annotations

from pathlib import Path

from rl_insight.server.fleet.records import SharedDocument, SharedRecords
from rl_insight.server.live.run_conditions import RunConditions
from rl_insight.server.live.step_clock import StepClock
from rl_insight.server.runstore.backend.location import parse_store

RUN = ("p", "e")
STALLED = {"stalled": [{"lane": "rank_2", "state": "train_batch", "open_s": 226.0, "usual_p95_s": 1.2}]}


def test_the_leaders_stalled_and_hung_runs_reach_the_other_servers_and_follow_the_lease(
        postgres_url: str, tmp_path: Path) -> None:
    loc = parse_store(postgres_url, tmp_path)
    a, b = RunConditions(StepClock(), 0), RunConditions(StepClock(), 0)
    doc_a, doc_b = (SharedDocument(SharedRecords(loc, "conditions"), "fleet") for _ in range(2))

    a.on_insights({RUN: STALLED}, now=1000.0)  # a leads: its refresh names the stall
    a.share(doc_a, leading=True)
    b.share(doc_b, leading=False)
    assert b.of(RUN) == "stalled"
    assert b.stall(RUN) == a.stall(RUN) and "rank_2 has been in train_batch for 226 s" in b.stall(RUN).reason

    assert a.mark_hung(RUN, "rank_2 never reached all_reduce #3")
    a.share(doc_a, leading=True)
    b.share(doc_b, leading=False)
    assert b.all() == {RUN: "hung"} and b.stall(RUN).hung == "rank_2 never reached all_reduce #3"

    # the lease moves to b: its own refresh says the run moved again; a, following now, takes that
    b.on_insights({RUN: {"stalled": []}})
    b.share(doc_b, leading=True)
    a.share(doc_a, leading=False)
    assert a.all() == {} and a.of(RUN) is None
    # what a verdict asks (issue 64): judged and within its usual times, through either server; a run nobody judged
    assert a.lanes_usual(RUN) is True and b.lanes_usual(RUN) is True and a.lanes_usual(("p", "other")) is None

    # and back with no round between: a stores over a version of b's it never read (compare-and-set, retried)
    b.on_insights({RUN: STALLED}, now=1500.0)
    b.share(doc_b, leading=True)
    a.on_insights({RUN: STALLED}, now=2000.0)
    a.share(doc_a, leading=True)
    b.share(doc_b, leading=False)
    assert b.of(RUN) == "stalled" and b.stall(RUN).since == 2000.0
    assert b.lanes_usual(RUN) is False


def test_several_stalled_lanes_name_nobody_first() -> None:
    """Issue 64: four ranks stalled read "rank_0 has been in …" for the ten seconds before the verdict named rank_2;
    until a verdict knows the culprit, the reason counts the lanes and names none first."""
    stalled = [{"lane": f"rank_{i}", "state": "train_batch", "open_s": 53.0 - i, "usual_p95_s": 5.2} for i in range(4)]
    reason, lanes = RunConditions.reason_of({"stalled": stalled}) or ("", [])
    assert reason == "4 lanes stalled in train_batch, the longest for 53 s (usually 5.2 s at most)"
    assert lanes == ["rank_0", "rank_1", "rank_2", "rank_3"] and "rank_" not in reason
    one = RunConditions.reason_of({"stalled": stalled[2:3]})
    assert one is not None and one[0] == "rank_2 has been in train_batch for 51 s (usually 5.2 s at most)"


def test_a_run_holding_a_state_with_no_usual_length_is_not_judged() -> None:
    """A state seen for the first time (a job hanging in its first step) has no usual length to be within: the
    verdict then reads the stacks, never "not stuck" on the stall watch's word."""
    conditions = RunConditions(StepClock(), 0)
    conditions.on_insights({RUN: {"stalled": [], "unjudged": ["rank_0"]}, ("p", "ok"): {"stalled": []}})
    assert conditions.lanes_usual(RUN) is None and conditions.lanes_usual(("p", "ok")) is True

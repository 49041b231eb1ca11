"""The collective wavefront (semantics/collectives.py) on flight-recorder evidence as the client sends it: who never
entered the collective the others wait in, who called a different one, who entered and never finished."""

from __future__ import annotations

from typing import Any

from rl_insight.semantics.collectives import wavefront


def rank(enqueued: int, completed: int, calls: dict[int, tuple[str, list]] | None = None, pg: str = "0",
         state: str = "ok") -> dict[str, Any]:
    """A rank's evidence: its group's wavefront and an entry per sequence number (all_reduce of [4] by default)."""
    calls = calls or {}
    entries = [{"seq": s, "p2p": False, "op": "gloo:" + calls.get(s, ("all_reduce", [[4]]))[0], "pg": pg,
                "in_sizes": calls.get(s, ("all_reduce", [[4]]))[1], "state": "scheduled", "retired": s <= completed}
               for s in range(1, enqueued + 1)]
    return {"state": state, "groups": {pg: {"name": "default_pg", "enqueued": enqueued, "completed": completed}},
            "entries": entries}


def test_a_rank_that_never_entered_is_late() -> None:
    (f, *_) = wavefront({"rank_0": rank(3, 2), "rank_1": rank(3, 2), "rank_2": rank(2, 2), "rank_3": rank(3, 2)})
    assert (f["kind"], f["culprits"], f["seq"], f["op"]) == ("late", ["rank_2"], 3, "all_reduce")
    assert f["detail"] == "3 of 4 entered default_pg #3 (all_reduce); rank_2 never did (last entered #2)"


def test_a_different_operation_or_size_at_one_sequence_number_is_a_desync() -> None:
    skip = {3: ("broadcast", [[8]])}
    (f, *_) = wavefront({"rank_0": rank(3, 2), "rank_1": rank(3, 2), "rank_2": rank(3, 2, skip), "rank_3": rank(3, 2)})
    assert (f["kind"], f["culprits"], f["seq"], f["op"]) == ("desync", ["rank_2"], 3, "all_reduce")
    assert "rank_2 called broadcast [[8]]" in f["detail"]
    sizes = {2: ("all_reduce", [[5]])}
    (f, *_) = wavefront({"r0": rank(3, 1), "r1": rank(3, 1, sizes), "r2": rank(3, 1)})
    assert (f["kind"], f["culprits"], f["seq"]) == ("desync", ["r1"], 2)


def test_entered_by_all_and_finished_by_some_names_the_unfinished() -> None:
    (f, *_) = wavefront({"rank_0": rank(4, 4), "rank_1": rank(4, 3), "rank_2": rank(4, 4)})
    assert (f["kind"], f["culprits"], f["seq"]) == ("unfinished", ["rank_1"], 4)
    (f, *_) = wavefront({"rank_0": rank(4, 3), "rank_1": rank(4, 3)})
    assert (f["kind"], f["culprits"]) == ("stuck", [])
    (f, *_) = wavefront({"rank_0": rank(4, 4), "rank_1": rank(4, 4)})
    assert (f["kind"], f["culprits"]) == ("clear", [])


def test_groups_are_judged_apart_and_ranks_without_a_recorder_are_left_out() -> None:
    found = wavefront({"rank_0": {**rank(2, 2), "groups": {**rank(2, 2)["groups"], **rank(5, 4, pg="1")["groups"]},
                                  "entries": rank(2, 2)["entries"] + rank(5, 4, pg="1")["entries"]},
                       "rank_1": {**rank(2, 2), "groups": {**rank(2, 2)["groups"], **rank(4, 4, pg="1")["groups"]},
                                  "entries": rank(2, 2)["entries"] + rank(4, 4, pg="1")["entries"]},
                       "rank_2": rank(1, 1, state="off")})
    assert [(f["pg"], f["kind"], f["culprits"], f["members"]) for f in found] == [("1", "late", ["rank_1"], 2),
                                                                                 ("0", "clear", [], 2)]


def test_the_work_is_bounded_by_the_entries_sent_not_the_numbers_claimed() -> None:
    """A rank claiming 2^62 collectives (a bug, or an attacker's answer) once made this walk every sequence number on
    the thread that completes every run's snapshot (issue 64): only the numbers an entry holds are compared."""
    import threading

    huge = {"state": "ok", "groups": {"0": {"name": "default_pg", "enqueued": 2**62, "completed": 0}},
            "entries": rank(3, 0)["entries"]}
    found: list[Any] = []
    worker = threading.Thread(target=lambda: found.extend(wavefront({"rank_0": huge, "rank_1": rank(3, 0)})),
                              daemon=True)
    worker.start()
    worker.join(60)  # a bound on a hang, not a speed target: before the fix it ran for years
    assert found, "the wavefront never finished"
    assert (found[0]["kind"], found[0]["culprits"]) == ("late", ["rank_1"])


def test_groups_left_when_the_budget_runs_out_are_said_unexamined() -> None:
    ticks = iter(range(100))
    found = wavefront({"rank_0": {**rank(2, 2), "groups": {**rank(2, 2)["groups"], **rank(5, 4, pg="1")["groups"]},
                                  "entries": rank(2, 2)["entries"] + rank(5, 4, pg="1")["entries"]}},
                      budget_s=1.5, clock=lambda: float(next(ticks)))
    assert [(f["pg"], f["kind"]) for f in found] == [("0", "clear"), ("1", "unexamined")]
    assert "not compared within the 1.5 s budget" in found[1]["detail"]

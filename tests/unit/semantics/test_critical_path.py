"""The critical path of a step and its what-if savings, on hand-built steps whose answers are worked out by hand
(sync, separate-async with overlapping steps, an agent-loop step decided by its longest trajectory), and a property
test: the path and its gaps tile the step exactly, and no slack is negative."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rl_insight.semantics.critical_path import critical_path, cut_saving, generation_items, step_whatif_rows, what_if
from tests.lanes import examples

S = 10**9
NOW = 1000 * S


def state(lane: str, name: str, a: float, b: float | None, kind: str = "state") -> dict:
    return {"lane": lane, "name": name, "start_ns": int(a * S), "end_ns": None if b is None else int(b * S),
            "kind": kind}


def path_of(p: dict) -> list[tuple[str, str, float, float]]:
    return [(e["lane"], e["name"], e["start_ns"] / S, e["end_ns"] / S) for e in p["elements"]]


def test_sync_step_the_long_tail_replica_then_the_slower_rank() -> None:
    spans = [state("replica_0", "vllm_generate", 0, 3), state("replica_1", "vllm_generate", 0, 5),
             state("rank_0", "train_batch", 5.2, 9), state("rank_1", "train_batch", 5.1, 8.5),
             state("rank_0", "actor_update", 5.5, 8.8, kind="state_child")]  # nested: not an element of its own
    p = critical_path(spans, 0, 10 * S, NOW)
    # back from 10 s: rank_0 ended last (9 s: 1 s idle before the step's end), it began at 5.2 s, after replica_1's
    # generation ended (5 s: 0.2 s idle), which began with the step
    assert path_of(p) == [("replica_1", "vllm_generate", 0, 5), ("rank_0", "train_batch", 5.2, 9)]
    assert [(g["start_ns"] / S, g["end_ns"] / S) for g in p["gaps"]] == [(5, 5.2), (9, 10)]
    assert p["bubbles_s"] == pytest.approx(1.2)
    assert [e["slack_s"] for e in p["elements"]] == pytest.approx([0.2, 1.0])
    # replica_0 could have ended as late as 5.2 s (when the path's next element began); rank_1 at the step's end
    assert {o["lane"]: o["slack_s"] for o in p["others"]} == pytest.approx({"replica_0": 2.2, "rank_1": 1.5})
    assert p["by_stage"] == pytest.approx({"vllm_generate": 5.0, "train_batch": 3.8})
    items = generation_items(spans, 0, 10 * S, NOW)
    w = what_if(p, items, cut_percent=50, stage="train_batch", faster_percent=50)
    # the tail finishing with the others: generation would end at 3 s, not 5 s
    assert (w["tail_s"], w["tail_lane"]) == (pytest.approx(2.0), "replica_1")
    assert w["cut_s"] == pytest.approx(2.0)  # cutting the slowest of two items: the same 2 s here
    assert w["stage_s"] == pytest.approx(1.9) and w["bubbles_s"] == pytest.approx(1.2)


def test_sequential_requests_on_a_lane_shift_earlier_when_one_is_cut() -> None:
    # replica_0 serves three requests one after another (1 s, 4 s, 1 s), replica_1 one of 3 s; training follows
    spans = [state("replica_0", "vllm_generate", 0, 1), state("replica_0", "vllm_generate", 1, 5),
             state("replica_0", "vllm_generate", 5, 6), state("replica_1", "vllm_generate", 0, 3),
             state("rank_0", "train_batch", 6, 9)]
    p = critical_path(spans, 0, 9 * S, NOW)
    assert path_of(p) == [("replica_0", "vllm_generate", 0, 1), ("replica_0", "vllm_generate", 1, 5),
                          ("replica_0", "vllm_generate", 5, 6), ("rank_0", "train_batch", 6, 9)]
    assert p["bubbles_s"] == 0 and p["gaps"] == []
    items = generation_items(spans, 0, 9 * S, NOW)
    # the slowest 25 % of 4 items: the 4 s request; replica_0's last request then ends at 2 s, replica_1 at 3 s
    assert cut_saving(p, items, 25) == pytest.approx(3.0)
    assert what_if(p, items)["tail_s"] == pytest.approx(3.0)  # replica_0 finishing with replica_1 (6 s → 3 s)


def test_async_step_training_on_the_path_generation_of_the_next_step_hidden() -> None:
    # step [10, 20): training of this step 10 → 19.5; generation of the next step 12 → 19 overlaps it; the
    # generation this step trains on began at 4 s (in the previous step) and ended at 11 s
    spans = [state("replica_0", "vllm_generate", 4, 11), state("replica_0", "vllm_generate", 12, 19),
             state("rank_0", "train_batch", 10, 19.5)]
    p = critical_path(spans, 10 * S, 20 * S, NOW)
    assert path_of(p) == [("rank_0", "train_batch", 10, 19.5)]
    assert p["bubbles_s"] == pytest.approx(0.5)
    others = {(o["start_ns"] / S): o["slack_s"] for o in p["others"]}
    # the older generation, clipped to the step (from 10 s), could end 2 s later: then the next generation on its lane,
    # which may end 1 s later (at the step's end), would still have room to run its 7 s
    assert others == pytest.approx({10: 2.0, 12: 1.0})
    # generation is off the path: neither its tail nor a cut saves anything in this step
    w = what_if(p, generation_items(spans, 10 * S, 20 * S, NOW), cut_percent=50)
    assert (w["tail_s"], w["cut_s"]) == (0.0, 0.0)


def test_agent_loop_step_decided_by_its_longest_trajectory() -> None:
    # replica_0 runs three trajectories at once (concurrent: cutting one moves no other), the longest ends at 8 s
    spans = [state("replica_0", "agent_generate", 0, 8), state("replica_1", "agent_generate", 0, 4),
             state("rank_0", "train_batch", 8, 10)]
    trajectories = [{"replica": "replica_0", "start_ns": 0, "end_ns": 8 * S},
                    {"replica": "replica_0", "start_ns": 0, "end_ns": 3 * S},
                    {"replica": "replica_0", "start_ns": int(0.5 * S), "end_ns": int(3.5 * S)},
                    {"replica": "replica_1", "start_ns": 0, "end_ns": 4 * S}]
    p = critical_path(spans, 0, 10 * S, NOW)
    assert path_of(p)[0] == ("replica_0", "agent_generate", 0, 8)
    items = generation_items(spans, 0, 10 * S, NOW, trajectories)
    assert sorted(items["replica_0"]) == [(0, 3 * S), (0, 8 * S), (S // 2, int(3.5 * S))]
    # cutting the slowest 25 % (the 8 s trajectory): generation ends at 4 s (replica_1), 4 s earlier
    assert cut_saving(p, items, 25) == pytest.approx(4.0)
    assert what_if(p, items)["tail_s"] == pytest.approx(4.0)


def test_an_open_state_counts_until_now_and_an_empty_step_is_one_gap() -> None:
    p = critical_path([state("replica_0", "vllm_generate", 1, None)], 0, 5 * S, 3 * S)
    assert path_of(p) == [("replica_0", "vllm_generate", 1, 3)]
    assert [(g["start_ns"] / S, g["end_ns"] / S) for g in p["gaps"]] == [(0, 1), (3, 5)]
    empty = critical_path([], 0, 5 * S, NOW)
    assert empty["elements"] == [] and empty["bubbles_s"] == pytest.approx(5.0)


def test_the_rows_a_step_keeps() -> None:
    spans = [state("replica_0", "vllm_generate", 0, 3), state("replica_1", "vllm_generate", 0, 5),
             state("rank_0", "train_batch", 5.2, 9)]
    p = critical_path(spans, 0, 10 * S, NOW)
    rows = {(lane, name): v for lane, name, v in step_whatif_rows(p, generation_items(spans, 0, 10 * S, NOW))}
    assert rows[("@cp", "vllm_generate")] == pytest.approx(5.0) and rows[("@cplane", "rank_0")] == pytest.approx(3.8)
    assert rows[("@whatif", "tail")] == pytest.approx(2.0) and rows[("@whatif", "bubbles")] == pytest.approx(1.2)
    assert {name for lane, name in rows if lane == "@whatif"} == {"bubbles", "tail", "cut5", "cut10", "cut20"}


spans_strategy = st.lists(
    st.tuples(st.sampled_from(["replica_0", "replica_1", "rank_0", "rank_1", "tq"]),
              st.sampled_from(["vllm_generate", "train_batch", "update_weights"]),
              st.integers(-20, 120), st.integers(1, 60), st.booleans()),
    max_size=25,
)


@settings(max_examples=examples(300), deadline=None)
@given(spans_strategy, st.integers(0, 40), st.integers(1, 80))
def test_the_path_tiles_the_step_and_no_slack_is_negative(raw: list, a: int, length: int) -> None:
    spans = [{"lane": lane, "name": name, "start_ns": s * S // 10, "end_ns": None if is_open else (s + d) * S // 10,
              "kind": "state"} for lane, name, s, d, is_open in raw]
    a_ns, b_ns = a * S // 10, (a + length) * S // 10
    now = 90 * S // 10
    p = critical_path(spans, a_ns, b_ns, now)
    pieces = sorted([(e["start_ns"], e["end_ns"]) for e in p["elements"] + p["gaps"]])
    assert sum(y - x for x, y in pieces) == b_ns - a_ns  # exactly the step's duration
    assert all(x[1] == y[0] for x, y in zip(pieces, pieces[1:]))  # contiguous
    assert (pieces[0][0], pieces[-1][1]) == (a_ns, b_ns)
    assert all(e["slack_s"] >= 0 for e in p["elements"] + p["others"])
    w = what_if(p, generation_items(spans, a_ns, b_ns, now), cut_percent=20)
    assert 0 <= w["tail_s"] <= p["duration_s"] and 0 <= w["cut_s"] <= p["duration_s"]

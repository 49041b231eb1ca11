"""The run diff on hand-built per-step facts: the difference by stage, lane class and lane, and the sentence."""

from __future__ import annotations

import pytest

from rl_insight.semantics.run_diff import diff, lane_class


def facts(gen: dict[str, float], train: float, sync: float = 0.1) -> dict:
    g = max(gen.values())
    states = {"vllm_generate": g, "train_batch": train, "update_weights": sync}
    lanes = {**gen, "rank_0": train, "rank_1": train}
    return {"duration_s": g + train + sync, "states": states, "gen": gen, "lanes": lanes}


def test_a_slower_replica_is_named_with_the_stage_and_training_is_unchanged() -> None:
    a = {s: facts({"replica_0": 1.0, "replica_1": 1.1, "replica_2": 1.0}, 2.0) for s in range(1, 11)}
    b = {s: facts({"replica_0": 1.0, "replica_1": 1.1, "replica_2": 3.0}, 2.0) for s in range(1, 11)}
    b[11] = facts({"replica_0": 9.0}, 9.0)  # no step 11 in A: not aligned, not counted
    d = diff(a, b, ("base", "slow"))
    assert d["aligned_steps"] == 10 and [r["step"] for r in d["steps"]] == list(range(1, 11))
    assert d["median_a_s"] == pytest.approx(3.2) and d["median_b_s"] == pytest.approx(5.1)
    assert d["mean_delta_s"] == pytest.approx(1.9) and d["change"] == pytest.approx(1.9 / 3.2)
    assert list(d["by_stage"].items())[0] == ("vllm_generate", pytest.approx(1.9))
    assert d["by_stage"]["train_batch"] == 0 and d["by_class"]["rollout replicas"] == pytest.approx(2.0)
    assert d["lanes"][0]["lane"] == "replica_2" and d["lanes"][0]["slowest_share_b"] == 1.0
    assert d["lanes"][0]["slowest_share_a"] == 0.0  # replica_1 was A's slowest
    s = d["sentence"]
    assert s.startswith("slow's steps are 59 % longer than base's (median 5.10 s vs 3.20 s over 10 aligned steps)")
    assert ("+1.90 s a step in vllm_generate, from replica_2 (+2.00 s of generation a step; the slowest replica in "
            "100 % of slow's steps)") in s
    assert s.endswith("; training is unchanged."), s


def test_no_common_step_and_no_change() -> None:
    a = {1: facts({"replica_0": 1.0}, 1.0)}
    assert diff(a, {2: facts({"replica_0": 1.0}, 1.0)})["aligned_steps"] == 0
    same = diff(a, a, ("A", "B"))
    assert same["mean_delta_s"] == 0 and "about as long as" in same["sentence"]


def test_lane_classes() -> None:
    lanes = ("replica_3", "rollout/replica_1", "rank_0", "actor/rank3", "tq_storage_0", "x")
    assert [lane_class(x) for x in lanes] == [
        "rollout replicas", "rollout replicas", "trainer ranks", "trainer ranks", "TransferQueue", "other lanes"]


def test_two_runs_of_the_same_fault_are_no_difference() -> None:
    """Issue 51 item 7: the same fault twice differs only by the runs' own step-to-step noise; the diff says there is
    no significant difference and names no cause (it used to name the stage that happened to wobble most)."""
    import random

    rng = random.Random(7)

    def run() -> dict:
        return {s: facts({"replica_0": 1.0, "replica_1": 3.0 + rng.uniform(-0.4, 0.4)}, 2.0 + rng.uniform(-0.2, 0.2))
                for s in range(1, 13)}

    d = diff(run(), run(), ("first", "again"))
    assert not d["significant"] and d["noise_s"] > 0
    assert d["sentence"].startswith("No significant difference between again and first: their steps differ by ")
    assert "no cause is named" in d["sentence"] and "vllm_generate" not in d["sentence"]
    slow = {s: {**f, "duration_s": f["duration_s"] + 1.5} for s, f in run().items()}  # a real change stands out
    assert diff(run(), slow)["significant"]

"""The token ledger (semantics/token_ledger.py): verl's identities by hand, the job's own counts first, trajectories
last, "not reported" rather than a guess, and (hypothesis) counts that never go negative and add up."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rl_insight.demo.token_batch import batch_metrics
from rl_insight.semantics import token_ledger as T
from tests.lanes import examples


def test_trained_and_truncated_from_verls_own_metrics_by_hand() -> None:
    # 4 sequences: prompts 100 each, responses 50, 150, 1024 (clipped), 276 → total 400 + 1500 = 1900
    m = {"perf/total_num_tokens": 1900.0, "prompt_length/mean": 100.0, "response_length/mean": 375.0,
         "response_length/max": 1024.0, "response_length/clip_ratio": 0.25}
    got = T.step_tokens(m)
    assert got[T.TRAINED] == pytest.approx(1500) and got[T.TRUNCATED] == pytest.approx(1024)
    assert got["sources"] == {T.TRAINED: "verl metrics", T.TRUNCATED: "verl metrics"}
    assert got[T.GENERATED] is None and got[T.FILTERED] is None and got["unaccounted"] is None and got["groups"] is None
    assert "not reported by this job: generated, filtered, stale, aborted" in T.sentence(got)


def test_the_jobs_own_counts_come_first_and_trajectories_fill_in() -> None:
    m = {"tokens/trained": 900.0, "tokens/filtered": 300.0, "tokens/stale": 50.0, "perf/total_num_tokens": 1.0,
         "prompt_length/mean": 1.0, "response_length/mean": 1.0}
    trajectories = [("success", 700.0), ("truncated", 400.0), ("aborted", 120.0), ("success", None)]
    got = T.step_tokens(m, trajectories)
    assert got[T.TRAINED] == 900 and got["sources"][T.TRAINED] == "tokens/trained"  # not verl's 0.5
    assert got[T.GENERATED] == 1220 and got["sources"][T.GENERATED] == "trajectories"
    assert got[T.ABORTED] == 120 and got[T.TRUNCATED] == 400
    assert got["unaccounted"] == 0.0  # the parts (1,370) exceed what the trajectories saw: never negative
    total: dict = {}
    T.add(total, got)
    T.add(total, T.step_tokens({}))  # a step that reports nothing adds nothing
    assert total[T.TRAINED] == 900 and total[T.GENERATED] == 1220
    assert T.sentence({}).startswith("Tokens: not reported by this job")


def test_nonsense_is_not_reported_rather_than_guessed() -> None:
    for m in ({"tokens/trained": -5.0}, {"tokens/trained": float("nan")}, {"tokens/trained": float("inf")},
              {"perf/total_num_tokens": 100.0, "prompt_length/mean": 0.0, "response_length/mean": 0.0}):
        assert T.step_tokens(m)[T.TRAINED] is None, m


@settings(max_examples=examples(150), deadline=None)
@given(st.integers(0, 2**31), st.floats(20, 900), st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.75]),
       st.integers(1, 16), st.integers(1, 8))
def test_a_simulated_batch_adds_up_exactly(seed: int, mean: float, share: float, groups: int, n: int) -> None:
    """The demo's batch (demo/token_batch.py): trained tokens recovered from verl's length metrics alone, plus the
    job's filtered count, are the tokens generated; nothing is negative; the groups filtered are the share asked."""
    m = batch_metrics(random.Random(seed), mean, groups=groups, n=n, filter_share=share)
    got = T.step_tokens(m)
    assert all(v is None or v >= 0 for k, v in got.items() if k in T.CATEGORIES or k == "unaccounted")
    assert got[T.TRAINED] + got[T.FILTERED] == pytest.approx(got[T.GENERATED], rel=1e-9)
    assert got["unaccounted"] == pytest.approx(0, abs=1e-6 * got[T.GENERATED])
    assert 0 <= got[T.TRUNCATED] <= got[T.TRAINED] + 1e-6
    drawn, filtered = got["groups"]["drawn"], got["groups"]["filtered"]
    assert drawn - filtered == groups and filtered == round(groups / (1 - share)) - groups

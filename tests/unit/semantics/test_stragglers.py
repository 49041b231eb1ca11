"""The fail-slow radar's rule (semantics/stragglers.py), on small hand-built steps (the bench, bench/
bench_straggler_radar.py, scores it on seeded jobs of 1,024 and 4,096 ranks; these cases are not its shapes)."""

from __future__ import annotations

import random

import pytest

from rl_insight.semantics import stragglers as st

NS = 1_000_000_000


def _step(t0: float, ranks: int, compute: dict[int, float], *, jitter: random.Random | None = None,
          data: dict[int, float] | None = None, extra: list[dict] | None = None) -> tuple[list[dict], int, int]:
    """Ranks that load (0.1 s), compute (1 s unless `compute` says), all-reduce (wait for the last, 0.2 s) and stop."""
    spans = []
    arrive = {}
    for r in range(ranks):
        wobble = 1 + (jitter.uniform(-0.004, 0.004) if jitter else 0.0)
        d = (data or {}).get(r, 0.1) * wobble
        c = compute.get(r, 1.0) * wobble
        spans.append({"lane": f"rank_{r}", "name": "get_batch", "start_ns": int(t0 * NS), "end_ns": int((t0 + d) * NS)})
        spans.append({"lane": f"rank_{r}", "name": "forward_backward", "start_ns": int((t0 + d) * NS),
                      "end_ns": int((t0 + d + c) * NS)})
        arrive[r] = t0 + d + c
    end = max(arrive.values()) + 0.2
    for r in range(ranks):
        spans.append({"lane": f"rank_{r}", "name": "all_reduce", "start_ns": int(arrive[r] * NS),
                      "end_ns": int(end * NS)})
    return spans + (extra or []), int(t0 * NS), int(end * NS)


def test_the_waiters_wait_is_discounted_and_the_late_ranks_compute_stands_out() -> None:
    spans, a, b = _step(0.0, 4, {2: 1.3})
    times = st.lane_times(spans, a, b)
    assert times["rank_0"].wait_s == pytest.approx(0.3, abs=1e-6)
    assert times["rank_2"].wait_s == pytest.approx(0.0, abs=1e-6)
    for r in (0, 1, 3):  # their own part of the all-reduce is the transfer alone
        assert times[f"rank_{r}"].own["communication"] == pytest.approx(0.2, abs=1e-6)
    assert times["rank_2"].own["compute"] - times["rank_0"].own["compute"] == pytest.approx(0.3, abs=1e-6)
    assert times["rank_2"].own_s - times["rank_0"].own_s == pytest.approx(0.3, abs=1e-6)


@pytest.mark.parametrize(("name", "cause"), [
    ("vllm_generate", "rollout_generation"), ("generate_sequences", "rollout_generation"),
    ("update_weights", "weight_sync"), ("sync_weights", "weight_sync"), ("all_reduce", "communication"),
    ("nccl:all_gather", "communication"), ("get_batch", "input"), ("dataloader_next", "input"),
    ("tq_put", "transfer_queue"), ("transfer_queue_get", "transfer_queue"), ("update_actor", "compute"),
    ("train_batch", "compute"),
    ("compute_log_prob", "compute"),
])
def test_each_state_name_has_its_cause(name: str, cause: str) -> None:
    assert st.cause_of(name, "rank_0") == cause


def test_lane_classes_drop_the_number() -> None:
    assert [st.lane_class(x) for x in ("rank_12", "replica_3", "actor/rank3", "trainer")] == \
        ["rank", "replica", "actor/rank", "trainer"]


def _run(steps: int, ranks: int, slow: dict[int, dict[int, float]], seed: int,
         data: dict[int, dict[int, float]] | None = None,
         extras: dict[int, list[dict]] | None = None) -> tuple[st.Radar, dict[int, list[st.Finding]]]:
    """A job of `steps`; `slow[step]` the ranks' compute in that step; the radar and what opened when."""
    rng = random.Random(seed)
    radar = st.Radar()
    opened = {}
    t = 0.0
    for s in range(steps):
        spans, a, b = _step(t, ranks, slow.get(s, {}), jitter=rng, data=(data or {}).get(s),
                            extra=[{**x, "start_ns": int(t * NS) + x["start_ns"], "end_ns": int(t * NS) + x["end_ns"]}
                                   for x in (extras or {}).get(s, [])])
        got = radar.step(s, spans, a, b)
        if got:
            opened[s] = got
        t = b / NS + 0.5
    return radar, opened


def test_a_chronic_straggler_is_named_with_its_cause_within_three_steps_and_ends_when_it_recovers() -> None:
    slow = {s: {5: 1.15} for s in range(10, 30)}  # rank 5 computes 15 % longer from step 10 to 29
    radar, opened = _run(45, 16, slow, seed=3)
    assert list(opened) and min(opened) <= 12, opened
    (f,) = radar.findings
    assert (f.subject, f.cause) == ("rank_5", "compute")
    assert f.first_step >= 10 and f.chronic and not f.open and f.last_step <= 29
    said = f.as_json()
    assert said["kind"] == "straggler" and said["pattern"] == "chronic" and said["excess_s"] > 0.1
    assert "rank_5" in said["sentence"] and "compute" in said["sentence"]
    assert said["next"] and len(said["evidence"]) == 3 and 0 < said["confidence"] <= 1


def test_a_slow_data_loader_is_input_not_compute() -> None:
    data = {s: {9: 0.3} for s in range(8, 20)}  # rank 9 loads 0.3 s where the others take 0.1
    radar, _ = _run(20, 12, {}, seed=5, data=data)
    assert [(f.subject, f.cause) for f in radar.findings] == [("rank_9", "input")]


def test_a_one_step_spike_a_checkpoint_and_the_first_steps_name_nobody() -> None:
    slow = {0: {1: 2.0}, 1: {1: 2.0},  # the first steps: warm-up
            7: {3: 1.4},  # once
            12: {0: 4.0}}  # rank 0 writes a checkpoint in this step
    checkpoint = {12: [{"lane": "rank_0", "name": "save_checkpoint", "start_ns": 0, "end_ns": 3 * NS}]}
    radar, opened = _run(30, 8, slow, seed=11, extras=checkpoint)
    assert radar.findings == [] and opened == {}


def test_a_class_of_two_lanes_has_no_straggler() -> None:
    radar, _ = _run(20, 2, {s: {1: 1.5} for s in range(20)}, seed=1)
    assert radar.findings == []


def test_validation_and_profiling_steps_are_not_clean() -> None:
    assert not st.clean([{"name": "validate"}]) and not st.clean([{"name": "profile_window"}])
    assert not st.clean([{"name": "save_checkpoint"}]) and st.clean([{"name": "forward_backward"}])

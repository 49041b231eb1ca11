"""Insight metrics on hand-built span sets with known answers (definitions: docs/insights.md)."""

from __future__ import annotations

import pytest

from rl_insight.semantics import insights as ins

S = 10**9  # one second in ns


def span(name: str, lane: str, start_s: float, end_s: float | None, kind: str = "state", **attrs) -> dict:
    return {"id": f"{lane}-{name}-{start_s}", "name": name, "lane": lane, "kind": kind, "start_ns": int(start_s * S),
            "end_ns": None if end_s is None else int(end_s * S), "attributes": attrs}


def test_interval_algebra() -> None:
    assert ins.union([(5, 7), (0, 2), (1, 3), (7, 8)]) == [(0, 3), (5, 8)]
    assert ins.clip([(0, 10), (20, 30)], 5, 25) == [(5, 10), (20, 25)]
    assert ins.intersect([(0, 4), (6, 10)], [(3, 7)]) == [(3, 4), (6, 7)]
    assert ins.length([(0, 3), (5, 8)]) == 6


def test_phase_classification() -> None:
    assert ins.phase("vllm_generate", "replica_0") == "generation"
    assert ins.phase("generate_sequences", "rank_0") == "generation"
    assert ins.phase("update_weights", "replica_3") == "weight_sync"
    assert ins.phase("actor_update", "rank_2") == "training"
    assert ins.phase("load_data", "driver") == "other"


def test_utilization_and_bubbles_ignore_children_and_count_open_states_until_now() -> None:
    spans = [span("train_batch", "rank_0", 0, 2), span("actor_update", "rank_0", 0.5, 1.5, kind="state_child"),
             span("train_batch", "rank_0", 3, 4), span("vllm_generate", "replica_0", 4, None)]
    u = ins.lane_utilization(spans, 0, 5 * S, now_ns=6 * S)
    assert u["rank_0"]["busy_s"] == pytest.approx(3.0)
    assert u["rank_0"]["utilization"] == pytest.approx(0.6) and u["rank_0"]["bubble_ratio"] == pytest.approx(0.4)
    assert u["replica_0"]["busy_s"] == pytest.approx(1.0)  # open from 4 s, clipped to the window end (5 s)
    busy = ins.lane_busy(spans, 0, 5 * S, now_ns=6 * S)
    assert busy["rank_0"] == {"train_batch": pytest.approx(3.0)}


def test_step_windows_and_breakdown() -> None:
    windows = ins.step_windows([(100.0, 0), (110.0, 1), (110.5, 1), (120.0, 2)])
    assert windows == [(1, 100 * S, 110 * S), (2, 110 * S, 120 * S)]
    spans = [span("vllm_generate", "replica_0", 100, 104), span("vllm_generate", "replica_1", 101, 106),
             span("actor_update", "rank_0", 106, 109), span("actor_update", "rank_1", 106.5, 109.5),
             span("vllm_generate", "replica_0", 110, 112)]
    steps = ins.step_breakdown(spans, windows, now_ns=200 * S)
    assert steps[0]["step"] == 1 and steps[0]["duration_s"] == pytest.approx(10.0)
    assert steps[0]["states"] == {"actor_update": pytest.approx(3.5), "vllm_generate": pytest.approx(6.0)}
    assert steps[1]["states"] == {"vllm_generate": pytest.approx(2.0)}


def test_overlap_is_zero_for_sync_and_positive_for_async() -> None:
    sync = [span("vllm_generate", "replica_0", 0, 4), span("actor_update", "rank_0", 5, 8)]
    assert ins.overlap(sync, 0, 10 * S, now_ns=10 * S)["overlap_ratio"] == 0.0
    pipelined = [span("vllm_generate", "replica_0", 0, 10), span("actor_update", "rank_0", 5, 15)]
    o = ins.overlap(pipelined, 0, 20 * S, now_ns=20 * S)
    assert (o["generation_s"], o["training_s"], o["overlap_s"]) == (10.0, 10.0, 5.0)
    assert o["overlap_ratio"] == pytest.approx(5 / 15)


def test_long_tail_names_the_slowest_replica() -> None:
    spans = [span("vllm_generate", "replica_0", 0, 2), span("vllm_generate", "replica_1", 0, 3),
             span("vllm_generate", "replica_2", 0, 8), span("update_weights", "replica_2", 8, 9),
             span("actor_update", "rank_0", 0, 9)]
    (t,) = ins.long_tail(spans, [(1, 0, 10 * S)], now_ns=10 * S)
    assert t["slowest_lane"] == "replica_2" and t["median_s"] == pytest.approx(3.0)
    assert t["ratio"] == pytest.approx(8 / 3)
    assert set(t["lanes"]) == {"replica_0", "replica_1", "replica_2"}  # weight sync and trainer lanes excluded


def test_stalled_uses_the_state_history() -> None:
    now = 1000 * S
    history = [span("rollout", "replica_0", t, t + d) for t, d in ((0, 10), (20, 11), (40, 12), (60, 10))]
    stuck = span(
        "rollout", "replica_1", 900, None
    )  # open for 100 s; p95 of history 12 s -> threshold max(36, 60) = 60 s
    fine = span("rollout", "replica_2", 950, None)  # open for 50 s
    new_state = span("checkpoint", "rank_0", 100, None)  # no history: 900 s < 1800 s
    out = ins.stalled(history + [stuck, fine, new_state], now)
    assert [(s["lane"], s["state"]) for s in out] == [("replica_1", "rollout")]
    assert out[0]["threshold_s"] == pytest.approx(60.0) and out[0]["usual_p95_s"] == pytest.approx(12.0)
    assert ins.stalled([new_state], 2000 * S)[0]["threshold_s"] == 1800.0


def test_staleness_from_param_versions() -> None:
    versions = [(0.0, 1), (10.0, 2), (20.0, 3)]
    spans = [span("vllm_generate", "replica_0", 12, 15, param_version=1),  # trainer at 2 -> 1 behind
             span("vllm_generate", "replica_1", 21, 25, param_version=3),  # trainer at 3 -> current
             span("actor_update", "rank_0", 21, 25, param_version=0)]  # not a generation state
    s = ins.staleness(spans, versions, now_ns=30 * S)
    assert s == {"mean": 0.5, "max": 1.0, "samples": 2}
    assert ins.staleness(spans, [], now_ns=30 * S) is None


def test_summarize_combines_everything() -> None:
    spans = [
        span("vllm_generate", "replica_0", 0, 4),
        span("vllm_generate", "replica_1", 0, 6),
        span("actor_update", "rank_0", 6, 9),
    ]
    s = ins.summarize(spans, 0, 10 * S, now_ns=10 * S, step_samples=[(0.0, 0), (10.0, 1)])
    assert s["steps"][0]["states"] == {"actor_update": 3.0, "vllm_generate": 6.0}
    assert s["long_tail"][0]["slowest_lane"] == "replica_1"
    assert s["overlap"]["overlap_ratio"] == 0.0 and s["stalled"] == [] and s["staleness"] is None



def test_rollout_wait_is_the_gap_from_the_last_finished_generation_to_the_first_training_start() -> None:
    from rl_insight.semantics import insights as ins

    S = 10**9
    spans = [
        {"name": "vllm_generate", "lane": "replica_0", "kind": "state", "start_ns": 0, "end_ns": 3 * S},
        {"name": "vllm_generate", "lane": "replica_1", "kind": "state", "start_ns": 0, "end_ns": 4 * S},
        {"name": "train_batch", "lane": "rank_0", "kind": "state", "start_ns": 6 * S, "end_ns": 9 * S},   # waited 2 s
        {"name": "vllm_generate", "lane": "replica_0", "kind": "state", "start_ns": 10 * S, "end_ns": 12 * S},
        {"name": "train_batch", "lane": "rank_0", "kind": "state", "start_ns": 12 * S, "end_ns": 14 * S},  # no wait
    ]
    got = ins.rollout_wait(spans, [(1, 0, 10 * S), (2, 10 * S, 15 * S)], now_ns=20 * S)
    assert [(w["step"], w["wait_s"]) for w in got] == [(1, 2.0), (2, 0.0)]


def test_a_lane_stuck_past_its_usual_length_is_not_busy_for_the_excess() -> None:
    """Issue 64: a hung rank read 88 % utilization. The time past the stuck state's usual length is `stalled_s`."""
    now = 1000 * S
    history = [span("train_batch", "rank_0", t, t + 10) for t in (0, 20, 40, 60)]  # 10 s usually
    hung = span("train_batch", "rank_0", 800, None)  # open 200 s: 190 s past its usual length
    steady = span("vllm_generate", "replica_0", 800, 1000)
    out = ins.summarize(history + [hung, steady], 700 * S, now, now)
    lane = out["lanes"]["rank_0"]
    assert lane["stalled_s"] == pytest.approx(190.0) and lane["busy_s"] == pytest.approx(10.0)
    assert lane["utilization"] == pytest.approx(10 / 300) and "stalled_s" not in out["lanes"]["replica_0"]


def test_open_states_without_a_usual_length_are_unjudged() -> None:
    done = [span("train_batch", "rank_0", t, t + 1) for t in (0, 2, 4)]
    assert ins.unjudged(done + [span("train_batch", "rank_0", 6, None), span("checkpoint", "rank_1", 6, None)]) == \
        ["rank_1"]
    assert ins.unjudged([span("checkpoint", "rank_1", 6, None)], history={"checkpoint": [5.0, 6.0, 7.0]}) == []
    # four ranks that each finished one step: one step known, not four durations (the gloo job hanging in step 2)
    one_step = [span("actor_update", f"rank_{r}", 0, 1) for r in range(4)]
    assert ins.unjudged(one_step + [span("actor_update", f"rank_{r}", 2, None) for r in range(4)]) == \
        ["rank_0", "rank_1", "rank_2", "rank_3"]

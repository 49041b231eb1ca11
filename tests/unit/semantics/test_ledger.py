"""The goodput ledger's attribution (semantics/ledger.py), hand-computed for each schedule, and the invariant that a
step's reasons tile it: every lane's seconds add up to the window, none negative (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rl_insight.semantics import ledger as L
from tests.lanes import examples

S = 10**9


def span(lane: str, name: str, a: float, b: float | None, cut_short: bool = False) -> dict:
    return {"lane": lane, "name": name, "kind": "state", "start_ns": int(a * S), "end_ns": None if b is None
            else int(b * S), "attributes": {"cut_short": True} if cut_short else {}}


def test_a_synchronous_step_by_hand() -> None:
    spans = [span("replica_0", "vllm_generate", 0, 4), span("replica_1", "vllm_generate", 0, 6),
             span("rank_0", "train_batch", 6, 9), span("rank_1", "actor_compute_log_prob", 6, 9),
             span("replica_0", "update_weights", 9, 10), span("replica_1", "update_weights", 9, 10)]
    got = L.step_ledger(spans, 0, 10 * S, 10 * S)
    assert got == {
        "replica_0": {L.GENERATING: 4, L.WAIT_TAIL: 2, L.WAIT_TRAINING: 3, L.WEIGHT_SYNC: 1},
        "replica_1": {L.GENERATING: 6, L.WAIT_TRAINING: 3, L.WEIGHT_SYNC: 1},
        "rank_0": {L.WAIT_ROLLOUT: 4, L.WAIT_TAIL: 2, L.TRAINING: 3, L.WAIT_SYNC: 1},  # replica_1 alone: the tail
        "rank_1": {L.WAIT_ROLLOUT: 4, L.WAIT_TAIL: 2, L.LOGPROB: 3, L.WAIT_SYNC: 1}}
    total = L.totals(got, {"replica_0": 2, "replica_1": 2})  # tensor parallel 2: each replica is two devices
    assert sum(total.values()) == pytest.approx(10 * 6) and total[L.GENERATING] == 20
    # (issue 64: "the rest went to waiting: training 20 %, generating 33 %" read generating as a kind of waiting)
    assert L.sentence(total) == ("5 % of the device time went to training. Other work: generating 33 %, weight sync "
                                 "7 %. Waiting: for training 20 %, for the long-tail replica 13 %.")


def test_an_asynchronous_step_counts_the_overlap_once_per_lane() -> None:
    spans = [span("replica_0", "vllm_generate", 0, 8), span("rank_0", "train_batch", 2, 7),
             span("replica_1", "vllm_generate", 0, 3), span("replica_1", "update_weights", 2, 3)]  # sync inside gen
    got = L.step_ledger(spans, 0, 10 * S, 10 * S, lanes=["rank_1"])  # a lane with nothing in the step
    assert got["rank_0"] == {L.WAIT_ROLLOUT: 2, L.TRAINING: 5, L.WAIT_TAIL: 1, L.IDLE: 2}  # (trains through the sync)
    assert got["replica_0"] == {L.GENERATING: 8, L.IDLE: 2}
    assert got["replica_1"] == {L.GENERATING: 2, L.WEIGHT_SYNC: 1, L.WAIT_TRAINING: 4, L.WAIT_TAIL: 1, L.IDLE: 2}
    assert got["rank_1"] == {L.WAIT_ROLLOUT: 2, L.WAIT_SYNC: 1, L.WAIT_TAIL: 5, L.IDLE: 2}


def test_an_open_state_counts_until_now_and_names_map_to_reasons() -> None:
    got = L.step_ledger([span("rank_0", "train_batch", 1, None)], 0, 10 * S, 4 * S)
    assert got == {"rank_0": {L.IDLE: 7, L.TRAINING: 3}}
    assert [L.reason_of(n, lane) for n, lane in (
        ("compute_reward", "reward_0"), ("ref_compute_log_prob", "rank_0"), ("save_checkpoint", "rank_0"),
        ("validate", "rank_0"), ("tq_get", "rank_0"), ("sglang_generate", "replica_0"), ("sync_weights", "rank_0"),
        ("forward_backward", "rank_0"), ("tool_call", "agent"), ("env_step", "agent"))] == [
        L.SCORING, L.LOGPROB, L.CHECKPOINT, L.VALIDATION, L.DATA, L.GENERATING, L.WEIGHT_SYNC, L.TRAINING, L.TOOLS,
        L.OTHER]


def test_a_fully_asynchronous_step_by_hand() -> None:
    """Fully async (rollouts run ahead, one step stale): the replicas generate for the next step while the trainer
    trains this one; the trainer's start waits on an empty buffer (buffer starvation), a replica paused by the
    staleness bound waits for training, and the weight sync stops everyone."""
    spans = [span("replica_0", "vllm_generate", 0, 9), span("replica_1", "vllm_generate", 0, 4),
             span("replica_1", "vllm_generate", 5, 9), span("rank_0", "train_batch", 3, 9),
             *(span(lane, "update_weights", 9, 10) for lane in ("rank_0", "replica_0", "replica_1"))]
    got = L.step_ledger(spans, 0, 10 * S, 10 * S)
    assert got == {"replica_0": {L.GENERATING: 9, L.WEIGHT_SYNC: 1},
                   "replica_1": {L.GENERATING: 8, L.WAIT_TRAINING: 1, L.WEIGHT_SYNC: 1},
                   "rank_0": {L.WAIT_ROLLOUT: 3, L.TRAINING: 6, L.WEIGHT_SYNC: 1}}
    assert L.totals(got)[L.TRAINING] == 6 and sum(L.totals(got).values()) == 30  # the overlap, counted once a lane


def test_an_agent_loop_step_by_hand() -> None:
    """An agent loop: the replica idles while the agent's tools run, the trainer and the tool worker wait for the
    rollout (its turns and tools), then both rollout lanes wait for training."""
    spans = [span("replica_0", "vllm_generate", 0, 2), span("agent_0", "tool_call", 2, 3),
             span("replica_0", "vllm_generate", 3, 5), span("agent_0", "tool_call", 5, 6),
             span("replica_0", "vllm_generate", 6, 7), span("rank_0", "train_batch", 7, 10)]
    got = L.step_ledger(spans, 0, 10 * S, 10 * S)
    assert got == {"replica_0": {L.GENERATING: 5, L.WAIT_TOOLS: 2, L.WAIT_TRAINING: 3},
                   "agent_0": {L.WAIT_ROLLOUT: 5, L.TOOLS: 2, L.WAIT_TRAINING: 3},
                   "rank_0": {L.WAIT_ROLLOUT: 7, L.TRAINING: 3}}


def test_a_crash_and_its_restart_are_lost() -> None:
    """rank_1's process dies in its update (its state cut short at its last heartbeat, 5 s) and comes back at 8 s: the
    state and the wait for the restart are lost on its lane, and rank_0, which has nothing else to wait for meanwhile,
    loses that time too; the replica waits for training as long as rank_0 trains."""
    spans = [span("replica_0", "vllm_generate", 0, 3), span("rank_0", "update_actor", 3, 6),
             span("rank_1", "update_actor", 3, 5, cut_short=True), span("rank_1", "update_actor", 8, 10)]
    got = L.step_ledger(spans, 0, 10 * S, 10 * S)
    assert got["rank_1"] == {L.WAIT_ROLLOUT: 3, L.LOST: 5, L.TRAINING: 2}
    assert got["rank_0"] == {L.WAIT_ROLLOUT: 3, L.TRAINING: 3, L.LOST: 2, L.IDLE: 2}
    assert got["replica_0"] == {L.GENERATING: 3, L.WAIT_TRAINING: 5, L.LOST: 2}


def test_a_lane_down_since_an_earlier_step_is_lost_until_it_works_again() -> None:
    """rank_1's process died in the previous step (its last state cut short) and is back at 4 s; rank_2 died too but a
    later state shows it came back before this step; replica_0's last state simply ended."""
    before = [span("rank_1", "update_actor", -6, -5, cut_short=True), span("rank_2", "update_actor", -6, -5,
                                                                           cut_short=True),
              span("rank_2", "update_actor", -4, -3), span("replica_0", "vllm_generate", -3, -1)]
    down = L.lost_at(before, 0)
    assert down == {"rank_1"}
    spans = [span("replica_0", "vllm_generate", 0, 4), span("rank_1", "update_actor", 4, 10),
             span("rank_2", "update_actor", 4, 10)]
    got = L.step_ledger(spans, 0, 10 * S, 10 * S, down=down | {"rank_3"})  # rank_3: down the whole step
    assert got["rank_1"] == {L.LOST: 4, L.TRAINING: 6} and got["rank_3"] == {L.LOST: 10}
    assert got["rank_2"] == {L.WAIT_ROLLOUT: 4, L.TRAINING: 6}
    assert got["replica_0"] == {L.GENERATING: 4, L.WAIT_TRAINING: 6}


LANES = ["rank_0", "rank_1", "replica_0", "replica_1", "reward_0"]
NAMES = ["train_batch", "vllm_generate", "update_weights", "compute_reward", "ref_compute_log_prob", "save_checkpoint"]


def reference_ledger(spans: list[dict], a: int, b: int, now_ns: int, lanes: list[str]) -> dict[str, dict[str, float]]:
    """The definition, computed the slow way: every lane, in every elementary piece between any two state edges."""
    pieces: dict[str, list[tuple[int, int, str]]] = {lane: [] for lane in lanes}
    cuts = {a, b}
    for s in spans:
        end = s["end_ns"] if s["end_ns"] is not None else now_ns
        lo, hi = max(s["start_ns"], a), min(end, b)
        if hi > lo:
            reason = L.LOST if s["attributes"].get("cut_short") else L.reason_of(s["name"], s["lane"])
            pieces.setdefault(s["lane"], []).append((lo, hi, reason))
            cuts.update((lo, hi))
    edges = sorted(cuts)
    rank = {r: i for i, r in enumerate(L.WORK_ORDER)}
    work = {lane: [min((r for lo, hi, r in its if lo <= x and y <= hi), key=rank.__getitem__, default=None)
                   for x, y in zip(edges, edges[1:])] for lane, its in pieces.items()}
    for row in work.values():  # a lane whose process died is lost until it works again
        for i in range(1, len(row)):
            if row[i] is None and row[i - 1] == L.LOST:
                row[i] = L.LOST
    rollout = {lane for lane, its in pieces.items() if any(r == L.GENERATING for *_, r in its)}
    out: dict[str, dict[str, float]] = {lane: {} for lane in work}
    for i, (x, y) in enumerate(zip(edges, edges[1:])):
        busy = {row[i] for row in work.values() if row[i] is not None}
        tail = L.GENERATING in busy and any(work[lane][i] is None for lane in rollout)
        for lane, row in work.items():
            kind = "trainer" if L.is_trainer(lane) else "rollout" if lane in rollout else "other"
            reason = row[i] or L.waiting_reason(kind, busy, tail)
            out[lane][reason] = out[lane].get(reason, 0.0) + (y - x) / S
    return out


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(LANES + ["agent_0"]), st.sampled_from(NAMES + ["tool_call"]),
                          st.integers(-5, 25), st.integers(0, 30) | st.none(),
                          st.sampled_from([False] * 5 + [True])), max_size=30),
       st.integers(0, 10), st.integers(1, 20))
def test_the_sweep_agrees_with_the_definition(raw: list, a: int, width: int) -> None:
    spans = [span(lane, name, s, None if d is None else s + d, cut) for lane, name, s, d, cut in raw]
    got = L.step_ledger(spans, a * S, (a + width) * S, 15 * S, lanes=["rank_9"])
    want = reference_ledger(spans, a * S, (a + width) * S, 15 * S, ["rank_9"])
    assert set(got) == set(want)
    for lane in want:
        keys = {k for k in set(got[lane]) | set(want[lane]) if max(got[lane].get(k, 0), want[lane].get(k, 0)) > 1e-9}
        assert {k: pytest.approx(got[lane].get(k, 0.0), abs=1e-9) for k in keys} == \
            {k: want[lane].get(k, 0.0) for k in keys}, (lane, got[lane], want[lane])


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(LANES), st.sampled_from(NAMES), st.integers(-5, 25),
                          st.integers(0, 30) | st.none()), max_size=30),
       st.integers(0, 10), st.integers(1, 20))
def test_every_lane_tiles_the_step_and_nothing_is_negative(raw: list, a: int, width: int) -> None:
    spans = [span(lane, name, s, None if d is None else s + d) for lane, name, s, d in raw]
    got = L.step_ledger(spans, a * S, (a + width) * S, 15 * S, lanes=["rank_9"])
    for lane, reasons in got.items():
        assert sum(reasons.values()) == pytest.approx(width, abs=1e-9), (lane, reasons)
        assert all(v >= 0 for v in reasons.values()) and set(reasons) <= set(L.REASONS)
    total = L.totals(got)
    assert sum(total.values()) == pytest.approx(width * len(got), abs=1e-6)

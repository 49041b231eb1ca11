"""The demo pair (issue 25): the same job twice, the second with `--fault slow-replica` (the last replica 3x slower
from step 2). The diff names the slow replica and the generation stage as the cause — in the API and the CLI — and
the slow run's critical path runs through that replica, whose finishing with the others is the biggest fix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import DEMO_PAIR_REPLICAS, DemoPair

# alone, in the second pass: the slow replica's extra second must stand out of the runs' own step-to-step noise, which
# a machine loaded by the first pass's workers widens past it; and the demo pair is made there for the browser tests
# anyway (session-scoped), so the first pass no longer makes it at all
pytestmark = pytest.mark.alone

SLOW = f"replica_{DEMO_PAIR_REPLICAS - 1}"


def _get(pair: DemoPair, path: str, **params: object) -> dict:
    r = httpx.get(pair.url + path, params=params, headers={"Authorization": f"Bearer {pair.token}"}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_the_diff_names_the_slow_replica_and_the_generation_stage(demo_pair: DemoPair) -> None:
    srv, base, slow = demo_pair, demo_pair.base, demo_pair.slow
    d = _get(srv, "/api/v1/runs/diff", a=base, b=slow, steps="2-7")
    assert d["aligned_steps"] >= 5 and d["median_b_s"] > d["median_a_s"]
    top_stage, top_delta = next(iter(d["by_stage"].items()))
    assert top_stage == "vllm_generate" and top_delta > 0, d["by_stage"]
    assert d["lanes"][0]["lane"] == SLOW and d["lanes"][0]["generation_delta_s"] > 0, d["lanes"]
    assert next(iter(d["by_class"])) == "rollout replicas"
    assert "vllm_generate" in d["sentence"] and SLOW in d["sentence"] and "longer" in d["sentence"], d["sentence"]
    assert "biggest single fix" in d["sentence"] and "long-tail replica" in d["sentence"], d["sentence"]
    assert all(r["step"] in range(2, 8) for r in d["steps"])
    # two windows of one run, aligned by their order (B's steps numbered as A's); a window against itself: no change
    w = _get(srv, "/api/v1/runs/diff", a=slow, b=slow, a_steps="2-4", b_steps="5-7")
    assert w["aligned_steps"] == 3 and [r["step"] for r in w["steps"]] == [2, 3, 4] and "steps 5-7" in w["names"][1]
    assert [r["b_s"] for r in w["steps"]] != [r["a_s"] for r in w["steps"]]
    again = _get(srv, "/api/v1/runs/diff", a=slow, b=slow, a_steps="2-4", b_steps="2-4")
    assert again["mean_delta_s"] == 0 and again["by_class"] and all(v == 0 for v in again["by_class"].values())
    # the same run against itself: no change
    same = _get(srv, "/api/v1/runs/diff", a=base, b=base)
    assert same["mean_delta_s"] == 0 and "about as long as" in same["sentence"]


def test_the_slow_runs_critical_path_and_savings(demo_pair: DemoPair) -> None:
    srv, base, slow = demo_pair, demo_pair.base, demo_pair.slow
    p = _get(srv, f"/api/v1/runs/{slow}/critical-path", step=5, stage="train_batch", faster_percent=50)
    assert p["step"] == 5 and any(e["lane"] == SLOW and e["name"] == "vllm_generate" for e in p["elements"])
    tiled = sum(e["seconds"] for e in p["elements"]) + sum(g["seconds"] for g in p["gaps"])
    assert tiled == pytest.approx(p["duration_s"], rel=1e-6)
    assert p["what_if"]["tail_lane"] == SLOW and p["what_if"]["tail_s"] > 0.05
    assert p["what_if"]["stage_s"] == pytest.approx(p["by_stage"].get("train_batch", 0.0) * 0.5)
    e = _get(srv, f"/api/v1/runs/{slow}/explain", steps="2-7")
    assert e["steps"] >= 5 and e["biggest"] == "tail" and next(iter(e["path_lanes"])) in (SLOW, "rank_0", "rank_1")
    assert SLOW in e["path_lanes"]
    # bad input is a clear error
    r = httpx.get(f"{srv.url}/api/v1/runs/{slow}/explain", params={"cut_percent": 7},
                  headers={"Authorization": f"Bearer {srv.token}"})
    assert r.status_code == 422 and "cut_percent" in r.text
    r = httpx.get(f"{srv.url}/api/v1/runs/{slow}/critical-path", params={"step": 999},
                  headers={"Authorization": f"Bearer {srv.token}"})
    assert r.status_code == 404 and "no step 999" in r.json()["detail"]
    r = httpx.get(f"{srv.url}/api/v1/runs/diff", params={"a": base, "b": slow, "steps": "9-3"},
                  headers={"Authorization": f"Bearer {srv.token}"})
    assert r.status_code == 422 and "backwards" in r.json()["detail"]
    assert httpx.get(f"{srv.url}/api/v1/runs/diff", params={"a": base, "b": slow}).status_code == 401


def test_the_cli_says_it_too(demo_pair: DemoPair, tmp_path: Path) -> None:
    srv, slow = demo_pair, demo_pair.slow
    cmd = [sys.executable, "-m", "rl_insight", "runs"]
    common = ["--server-url", srv.url, "--token", srv.token, "--home", str(tmp_path / "h")]
    r = subprocess.run([*cmd, "diff", "rl-insight-demo/base", "rl-insight-demo/slow", "--steps", "2-7", *common],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("rl-insight-demo/slow's steps are") and SLOW in first, r.stdout
    assert "STAGE" in r.stdout and "LANE CLASS" in r.stdout
    assert "they went to waiting for the long-tail replica" in r.stdout  # docs/ledger.md
    assert "LEDGER REASON" in r.stdout
    r = subprocess.run([*cmd, "ledger", "rl-insight-demo/slow", *common], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "% of the device time went to training" in r.stdout, \
        r.stdout + r.stderr
    assert "REASON" in r.stdout and "waiting: long-tail replica" in r.stdout and "device-seconds" in r.stdout
    assert "Tokens: " in r.stdout and " generated; trained " in r.stdout and "filtered " in r.stdout
    j = subprocess.run([*cmd, "ledger", str(slow), "--json", *common], capture_output=True, text=True, timeout=60)
    steps = json.loads(j.stdout)["steps"]
    assert steps and set(steps[0]) == {"step", "wall_s", "devices", "total", "reasons", "tokens", "cost"}
    r = subprocess.run([*cmd, "explain", str(slow), "--step", "5", *common], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "critical path" in r.stdout and SLOW in r.stdout, r.stdout + r.stderr
    r = subprocess.run([*cmd, "explain", str(slow), *common], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "not waiting for the slowest 10 % of generations" in r.stdout, r.stdout + r.stderr
    assert "cut10" not in r.stdout  # (issue 49 item 21: the key was printed unexplained)
    r = subprocess.run([*cmd, "diff", "rl-insight-demo/nope", str(slow), *common], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "no run rl-insight-demo/nope" in r.stderr and "rl-insight runs list" in r.stderr


def test_the_ledger_tiles_every_step_and_the_slow_replicas_cost_lands_in_the_long_tail(demo_pair: DemoPair) -> None:
    """docs/ledger.md on real demo runs: each step's reasons add up to its wall time × devices (within 1 %), and what
    the slow replica adds (`--fault slow-replica`) is mostly the others waiting for it."""
    srv = demo_pair
    ledgers = {name: _get(srv, f"/api/v1/runs/{rid}/ledger", steps="2-7") for name, rid in (("base", srv.base),
                                                                                          ("slow", srv.slow))}
    for name, d in ledgers.items():
        assert len(d["steps"]) >= 5 and not d["pending"], (name, d)
        for s in d["steps"]:
            assert s["devices"] == 2 + 4  # two trainer ranks, four replicas of one device (the demo's config says tp 1)
            assert abs(sum(s["reasons"].values()) - s["wall_s"] * s["devices"]) <= 0.01 * s["wall_s"] * s["devices"]
        assert d["devices_note"] == ("each rollout replica counts 1 device (the run's config: "
                                     "actor_rollout_ref.rollout.tensor_model_parallel_size)")
        assert d["sentence"].endswith(".") and 0 < d["goodput"] < 1

    def per_step(d: dict, reason: str | None = None) -> float:
        return sum(s["total"] if reason is None else s["reasons"].get(reason, 0.0) for s in d["steps"]) / len(
            d["steps"])

    extra = per_step(ledgers["slow"]) - per_step(ledgers["base"])
    tail = per_step(ledgers["slow"], "waiting: long-tail replica") - per_step(ledgers["base"],
                                                                              "waiting: long-tail replica")
    assert extra > 0 and tail >= 0.6 * extra, (extra, tail, ledgers["slow"]["run"], ledgers["base"]["run"])
    # the run diff says the same: where B's extra device-hours went, the long tail first
    d = _get(srv, "/api/v1/runs/diff", a=srv.base, b=srv.slow, steps="2-7")["ledger"]
    assert next(iter(d["by_reason"])) == "waiting: long-tail replica" and d["b_per_step_s"] > d["a_per_step_s"]
    assert d["sentence"].startswith("B spends ")
    assert "they went to waiting for the long-tail replica (+" in d["sentence"]


def test_the_long_tail_bucket_grows_by_the_wait_the_slow_replica_causes(demo_pair: DemoPair) -> None:
    """The injected delay, measured independently of the ledger: in each step the replicas' generation ends at
    different times (the long-tail insight's busy seconds per replica, which start together), and every other device
    waits for the last one; the long-tail bucket's growth from the base run to the slow one matches that wait's growth
    within 5 %."""
    srv = demo_pair

    def tail_per_step(rid: int) -> tuple[float, float]:
        led = _get(srv, f"/api/v1/runs/{rid}/ledger", steps="2-7")
        ins = _get(srv, f"/api/v1/runs/{rid}/insights", window_s=3600, max_steps=100)
        busy = {t["step"]: t["lanes"] for t in ins["long_tail"]}
        steps = [s for s in led["steps"] if s["step"] in busy]
        assert len(steps) >= 5, (led["steps"], busy)
        measured = expected = 0.0
        for s in steps:
            lanes = busy[s["step"]]
            last, first = max(lanes.values()), min(lanes.values())
            trainers = s["devices"] - len(lanes)
            expected += sum(last - v for v in lanes.values()) + trainers * (last - first)
            measured += s["reasons"].get("waiting: long-tail replica", 0.0)
        return measured / len(steps), expected / len(steps)

    (base_m, base_e), (slow_m, slow_e) = tail_per_step(srv.base), tail_per_step(srv.slow)
    grew, wait_grew = slow_m - base_m, slow_e - base_e
    assert wait_grew > 1.0, (base_e, slow_e)  # the fault adds device-seconds of waiting to every step
    assert abs(grew - wait_grew) <= 0.05 * wait_grew, (grew, wait_grew, base_m, slow_m)


def test_the_token_ledger_reports_the_filtered_groups_exactly(demo_pair: DemoPair) -> None:
    """The slow run filters exactly a quarter of the groups it draws (32 drawn, 8 filtered, 24 trained each step):
    the token ledger says so for every step, its trained tokens — derived from verl's own length metrics — and the
    job's filtered count add up to the tokens it generated, and the base run filters none."""
    srv = demo_pair
    slow = _get(srv, f"/api/v1/runs/{srv.slow}/ledger", steps="2-7")
    base = _get(srv, f"/api/v1/runs/{srv.base}/ledger", steps="2-7")
    for s in slow["steps"]:
        t = s["tokens"]
        assert t["groups"] == {"drawn": 32, "filtered": 8}, t
        assert t["sources"]["trained"] == "verl metrics" and t["sources"]["filtered"] == "tokens/filtered"
        assert abs(t["trained"] + t["filtered"] - t["generated"]) <= 1e-6 * t["generated"], t
        assert 0 <= t["truncated"] <= t["trained"] and t["unaccounted"] <= 1e-6 * t["generated"]
    tokens = slow["run"]["tokens"]
    assert tokens["filtered"] == sum(s["tokens"]["filtered"] for s in slow["steps"]) > 0
    assert slow["token_goodput"] == pytest.approx(tokens["trained"] / tokens["generated"])
    assert "filtered" in slow["tokens_sentence"] and "not reported" not in slow["tokens_sentence"]
    assert all(s["tokens"]["filtered"] == 0 and s["tokens"]["groups"]["filtered"] == 0 for s in base["steps"])

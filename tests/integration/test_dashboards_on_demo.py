"""Every dashboard and rule query against a real Prometheus scraping two running demos (sync+vLLM, async+SGLang).

After variable substitution each PromQL expression must execute without error and return at least
one series for the demo's run, and none for another experiment (scoping works).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import wait_until
from tests.integration.conftest import Stack, cli, start_stack

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PROJECT = "dash-test"
RUNS = {"sync-vllm": ("sync", "vllm"), "async-sglang": ("async", "sglang"), "sync-omni": ("sync", "vllm-omni"),
        "slime-sglang": ("sync", "sglang")}
SLIME_RUN = "slime-sglang"  # demo --framework slime: upstream's slime dashboard instead of the verl trainer board
AGENT_RUN = "sync-vllm"  # its rollout is the --agent loop: agent_loop_session's gauges for agent_loop_trajectory
ENGINE_BOARD = {"vllm": "verl_trainer_v1_with_vllm_engine.json", "sglang": "verl_trainer_v1_with_sglang_engine.json",
                "vllm-omni": "verl_omni_trainer_v1_with_vllm_omni_engine.json"}
SHARED_BOARDS = ["rl_insight_overview.json", "transfer_queue.json", "hardware.json", "quick_start_demo.json"]
# A firing-alerts panel is empty while the run is healthy: it must execute, not return data.
MAY_BE_EMPTY = re.compile(r"\bALERTS\{")
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")


def substitute(expr: str, experiment: str) -> str:
    return (expr.replace("$__rate_interval", "1m").replace("$__interval", "15s").replace("$__range", "5m")
            .replace("$project", PROJECT).replace("$experiment_name", experiment).replace("$replica", ".*")
            .replace("$omni_model_name", ".*").replace("$stage", ".*").replace("$step", ".*").replace("$sample", ".*")
            .replace("$session", ".*").replace("$traj", ".*"))


def query(prom_url: str, expr: str, client: httpx.Client | None = None) -> tuple[str, list]:
    if client is None:
        with httpx.Client(trust_env=False) as one:
            return query(prom_url, expr, one)
    r = client.get(prom_url + "/api/v1/query", params={"query": expr}, timeout=10)
    body = r.json()
    return body.get("status"), body.get("data", {}).get("result", []) if body.get("status") == "success" else body.get(
        "error"
    )


def query_all(prom_url: str, exprs: list[str]) -> list[tuple[str, list]]:
    """Each expression's (status, result), in order, asked a few at a time (hundreds of panels' queries one after
    the other were most of this module's minutes; Prometheus answers them on its own threads)."""
    with httpx.Client(trust_env=False) as client, ThreadPoolExecutor(6) as pool:
        return list(pool.map(lambda e: query(prom_url, e, client), exprs))


def dashboard_exprs(name: str) -> list[tuple[str, str]]:
    d = json.loads((ROOT / "dashboards" / name).read_text())
    out = []
    for p in d["panels"]:
        for t in p.get("targets", []):
            if "expr" in t:
                out.append((f"{name}: {p['title']}", t["expr"]))
    return out


def variable_exprs(name: str) -> list[tuple[str, str]]:
    """The series a board's variables read (`label_values(X, label)` and `query_result(X)` run X)."""
    d = json.loads((ROOT / "dashboards" / name).read_text())
    out = []
    for v in d["templating"]["list"]:
        q = v.get("definition", "")
        m = re.fullmatch(r"label_values\((.+),\s*\w+\)", q) or re.fullmatch(r"query_result\((.+)\)", q)
        if m:
            out.append((f"{name}: variable {v['name']}", m.group(1)))
    return out


def rule_exprs() -> list[tuple[str, str]]:
    out = []
    for f in sorted((ROOT / "provisioning" / "rules").glob("*.yml")):
        for g in yaml.safe_load(f.read_text())["groups"]:
            for r in g["rules"]:
                if "record" in r:  # alert expressions are conditions (empty when healthy); their inputs are recorded
                    out.append((f"rule {r['record']}", r["expr"]))
    return out


def skip_without_node_exporter(where: str, expr: str) -> bool:
    return NODE_EXPORTER is None and "node_" in expr and not os.environ.get("CI")


@pytest.fixture(scope="module")
def demo_stack(tmp_path_factory: pytest.TempPathFactory):
    if os.environ.get("CI") and NODE_EXPORTER is None:
        pytest.fail("prometheus-node-exporter missing in CI; .ci/run installs it")
    home = tmp_path_factory.mktemp("dash") / "home"
    stack = start_stack(home)
    procs = []
    for exp, (mode, engine) in RUNS.items():
        env = {**os.environ, "RL_INSIGHT_HOME": str(home), "RL_INSIGHT_TOKEN": stack.token}
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "rl_insight",
                    "demo",
                    "--mode",
                    mode,
                    "--engine",
                    engine,
                    "--steps",
                    "400",
                    "--step-seconds",
                    "1.5",
                    "--replicas",
                    "3",
                    "--ranks",
                    "2",
                    "--project",
                    PROJECT,
                    "--experiment-name",
                    exp,
                    "--server-url",
                    stack.ingest_url,
                    *(["--agent"] if exp == AGENT_RUN else []),
                    *(["--framework", "slime"] if exp == SLIME_RUN else []),
                    "--moe",  # verl's rollout/moe/* metrics: the trainer boards' MoE heatmap
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    try:
        yield stack
    finally:
        for p in procs:
            p.send_signal(2)  # Ctrl+C: the demo stops cleanly and removes its targets
        for p in procs:
            try:
                out, _ = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
            assert "Demo finished" in out, out[-2000:]
        cli(home, "server", "stop")


def _wait_for_rules(stack: Stack) -> None:
    wait_until(lambda: query(stack.prometheus_url, "rl_insight:rollout_long_tail_ratio")[1], timeout=90, interval=1,
               what="recording rules evaluated on demo data")


@pytest.mark.parametrize("experiment", list(RUNS))
def test_every_dashboard_query_returns_data_for_the_run_and_none_for_another(
    demo_stack: Stack, experiment: str
) -> None:
    _wait_for_rules(demo_stack)
    engine = RUNS[experiment][1]
    board = "slime_training_with_sglang.json" if experiment == SLIME_RUN else ENGINE_BOARD[engine]
    # the overview's trainer panels read verl's keys (timing_s/*, critic/*): slime's run has its own board for those
    shared = [b for b in SHARED_BOARDS if not (experiment == SLIME_RUN and b == "rl_insight_overview.json")]
    boards = [board, *shared] + (
        ["agent_loop_trajectory.json"] if experiment == AGENT_RUN else []
    )
    exprs = [e for b in boards for e in dashboard_exprs(b)] + rule_exprs()
    missing: list[str] = []
    deadline = time.monotonic() + 90
    pending = list(exprs) + (variable_exprs("agent_loop_trajectory.json") if experiment == AGENT_RUN else [])
    while pending and time.monotonic() < deadline:  # rates need two scrapes; give slow starters a little time
        still = []
        pending = [(w, e) for w, e in pending if not skip_without_node_exporter(w, e)]
        answers = query_all(demo_stack.prometheus_url, [substitute(e, experiment) for _, e in pending])
        for (where, expr), (status, result) in zip(pending, answers):
            assert status == "success", f"{where}: query failed: {result}\n{substitute(expr, experiment)}"
            if not result and not MAY_BE_EMPTY.search(expr):
                still.append((where, expr))
        pending = still
        if pending:
            time.sleep(2)
    missing = [f"{w}: {substitute(e, experiment)}" for w, e in pending]
    assert not missing, "queries without data:\n" + "\n".join(missing)

    # scoping: the same queries for an experiment that does not exist return nothing
    leaking = []
    # recording rules aggregate every run; their dashboard uses are scoped and checked above
    scoped = [(w, e) for w, e in exprs if "rule " not in w]
    answers = query_all(demo_stack.prometheus_url, [substitute(e, "no-such-experiment") for _, e in scoped])
    for (where, expr), (status, result) in zip(scoped, answers):
        assert status == "success"
        if result:
            leaking.append(f"{where}: {expr}")
    assert not leaking, "queries returning another run's data:\n" + "\n".join(leaking)


def test_series_carry_only_the_selected_run(demo_stack: Stack) -> None:
    _, result = query(
        demo_stack.prometheus_url,
        substitute(
            '{__name__=~"vllm[:_]num_requests_running", project=~"$project", experiment_name=~"$experiment_name"}',
            "sync-vllm",
        ),
    )
    assert result and {r["metric"]["experiment_name"] for r in result} == {"sync-vllm"}
    assert sorted(r["metric"]["replica"] for r in result) == ["0", "1", "2"]
    _, result = query(demo_stack.prometheus_url, 'rl_insight_monitor_training_global_step{project="dash-test"}')
    assert {r["metric"]["experiment_name"] for r in result} == set(RUNS)


def test_demo_state_lanes_follow_the_schedules(demo_stack: Stack) -> None:
    spans = httpx.get(demo_stack.ingest_url + "/api/v1/spans/recent", params={"limit": 10000},
                      headers={"Authorization": f"Bearer {demo_stack.token}"}).json()["spans"]
    by_exp: dict[str, list[dict]] = {}
    for s in spans:
        by_exp.setdefault(s["attributes"].get("experiment_name"), []).append(s)
    sync = by_exp["sync-vllm"]
    assert {s["lane"] for s in sync} >= {"rank_0", "rank_1", "replica_0", "replica_1", "replica_2"}
    assert {s["name"] for s in sync} >= {
        "vllm_generate",
        "actor_compute_log_prob",
        "ref_compute_log_prob",
        "train_batch",
        "actor_update",
        "update_weights",
    }
    assert {s["name"] for s in by_exp["async-sglang"]} >= {"sglang_generate", "train_batch"}

    def overlap(spans: list[dict]) -> float:
        gen = [(s["start_ns"], s["end_ns"]) for s in spans if s["name"].endswith("_generate")]
        train = [(s["start_ns"], s["end_ns"]) for s in spans if s["lane"] == "rank_0" and s["kind"] == "state"]
        return sum(max(0, min(a2, b2) - max(a1, b1)) for a1, a2 in gen for b1, b2 in train)

    # sync: generation and training never overlap; separate async: they do
    assert overlap(sync) == 0
    assert overlap(by_exp["async-sglang"]) > 0


def test_healthy_demos_fire_no_alert(demo_stack: Stack) -> None:
    """The shipped rules stay quiet on healthy training (docs/alerts.md): four demo runs in every mode and engine,
    once the rules have been evaluated on their data, have no alert firing. (One may be pending for a moment: the
    agent loop's long tail passes 2x now and then, and RLInsightRolloutLongTail waits 10 minutes before it fires.)"""
    _wait_for_rules(demo_stack)
    time.sleep(3)  # a few evaluations (every second here) past the first
    alerts = httpx.get(demo_stack.prometheus_url + "/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    mine = [(a["labels"]["alertname"], a["labels"].get("experiment_name"), a["state"]) for a in alerts
            if a["labels"].get("project") in (PROJECT, None)]
    assert [m for m in mine if m[2] == "firing"] == [], mine
    assert {m[0] for m in mine} <= {"RLInsightRolloutLongTail"}, mine  # and nothing else even pending

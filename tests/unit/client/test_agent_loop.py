"""`agent_loop_session` (upstream 0.3.0's agent-loop protocol) through the public API into a real server:
the dashboard's gauges with upstream's names and labels on /metrics, the `agent_session` span in the run
store, and the info series leaving /metrics after their short TTL while the run store keeps them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import start_server, wait_until

JOB = r'''
import rl_insight
from rl_insight import agent_loop_session
from rl_insight.client.agent_loop import agent_loop_lane_id

class Traj:  # verl's trajectory objects carry these attributes
    def __init__(self, chain_id, reward_score, num_turns):
        self.chain_id, self.reward_score, self.num_turns = chain_id, reward_score, num_turns

rl_insight.init("agents", "react")
rl_insight.metric_gauge("training/global_step", 7)
s = agent_loop_session(project="agents", experiment_name="react", sample=3, session="s1", global_steps=7, uid="u-9")
lane = "experiment=react/sample=3/session=s1/traj=0"
assert s.identity["state_lane_id"] == agent_loop_lane_id("react", 3, "s1", 0) == lane
s.finish(trajectories=[Traj(1, 1.0, 3), {"chain_id": 2, "reward_score": "0.5", "num_turns": 5}, object()],
         status="success", runner_name="react", reward_source="verifier", finished=True)
s.finish(trajectories=[], status="error")  # a second finish is ignored
agent_loop_session(experiment_name="react", sample=4, session="s2").finish(trajectories=None, status="empty")
print("flushed", rl_insight.flush(10))
'''


def test_a_session_reaches_metrics_and_the_run_store_then_leaves_metrics(tmp_path: Path) -> None:
    srv = start_server(tmp_path, agent_loop_series_ttl_s=3.0)
    try:
        env = {**os.environ, "RL_INSIGHT_SERVER_URL": srv.url}
        r = subprocess.run([sys.executable, "-c", JOB], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "flushed True" in r.stdout, r.stdout + r.stderr
        metrics = httpx.get(srv.url + "/metrics").text
        p = "rl_insight_monitor_"
        traj_lines = [ln for ln in metrics.splitlines() if ln.startswith(p + "agent_loop_traj_info{")]
        assert len(traj_lines) == 3
        assert any('traj="0"' in ln and 'title="Trajectory #0 · reward 1 · 3 turns"' in ln and 'global_steps="7"' in ln
                   and 'leaf="sample=3/session=s1/traj=0"' in ln for ln in traj_lines)
        assert any('traj="1"' in ln and "reward 0.5 · 5 turns" in ln for ln in traj_lines)
        assert any('traj="2"' in ln and "reward 0 · 0 turns" in ln for ln in traj_lines)  # an object without the fields
        assert 'sess_key="sample=3/session=s1"' in metrics and 'title="Session s1"' in metrics
        for name in ("agent_loop_run_info", "agent_loop_sample_info", "agent_loop_first_turn_unixtime",
                     "agent_loop_last_turn_unixtime"):
            assert p + name + "{" in metrics, name

        srv.app.state.st.writer.flush(10)
        runs = httpx.get(srv.url + "/api/v1/runs").json()["runs"]
        run_id = next(r["id"] for r in runs if r["experiment_name"] == "react")
        lanes = [x["lane"] for x in httpx.get(f"{srv.url}/api/v1/runs/{run_id}/lanes").json()["lanes"]]
        assert "experiment=react/sample=3/session=s1/traj=0" in lanes
        rows = httpx.get(
            f"{srv.url}/api/v1/runs/{run_id}/spans", params={"from_ns": 0, "to_ns": time.time_ns()}
        ).json()["spans"]
        sessions = [row for row in rows if row[2] == "agent_session"]
        assert len(sessions) == 2  # the second finish() published nothing
        details = [httpx.get(f"{srv.url}/api/v1/runs/{run_id}/spans/{row[6]}").json()["attributes"] for row in sessions]
        first = next(d for d in details if d["sample"] == "3")
        assert first["monitor.trace_source"] == "session" and first["global_steps"] == 7  # numeric, for TraceQL
        assert (first["uid"], first["runner_name"], first["num_trajectories"], first["status"]) == (
            "u-9",
            "react",
            3,
            "success",
        )
        assert next(d for d in details if d["sample"] == "4")["status"] == "empty"

        # the info series leave /metrics after their TTL (one per trajectory must not pile up); the step stays
        wait_until(lambda: "agent_loop_traj_info" not in httpx.get(srv.url + "/metrics").text, timeout=20,
                   what="agent-loop series to expire from /metrics")
        assert p + "training_global_step" in httpx.get(srv.url + "/metrics").text
        names = {m["name"] for m in httpx.get(f"{srv.url}/api/v1/runs/{run_id}/metrics").json()["metrics"]}
        assert "agent_loop_traj_info" in names  # the run store keeps them
    finally:
        srv.stop()


def test_the_dashboard_hierarchy_in_order_and_never_an_exception(monkeypatch) -> None:
    """Upstream's private `_publish_agent_loop_session` keywords (its tests call it): run, sample, session, one per
    trajectory, first and last turn; a failing gauge never reaches the agent loop, and the span still goes out."""
    from rl_insight.client import agent_loop

    seen: list[tuple[str, float, dict]] = []
    monkeypatch.setattr(agent_loop, "metric_gauge", lambda name, value, **labels: seen.append((name, value, labels)))
    agent_loop._publish_agent_loop_session(
        experiment_name="x",
        sample=2,
        session="s",
        global_steps=9,
        start_time_ns=3 * 10**9,
        end_time_ns=5 * 10**9,
        trajectories=[{"chain_id": 4, "reward_score": 0.25, "num_turns": 6}, {"reward_score": float("inf")}],
    )
    assert [n for n, _, _ in seen] == ["agent_loop_run_info", "agent_loop_sample_info", "agent_loop_session_info",
                                       "agent_loop_traj_info", "agent_loop_traj_info", "agent_loop_first_turn_unixtime",
                                       "agent_loop_last_turn_unixtime"]
    assert [v for _, v, _ in seen][-2:] == [3.0, 5.0] and seen[0][2]["global_steps"] == "9"
    assert (
        seen[3][2]["title"] == "Trajectory #3 · reward 0.25 · 6 turns"
        and seen[4][2]["title"] == "Trajectory #1 · reward 0 · 0 turns"
    )

    def broken(*_a, **_k):
        raise RuntimeError("monitor down")
    spans: list[dict] = []
    monkeypatch.setattr(agent_loop, "metric_gauge", broken)
    monkeypatch.setattr(agent_loop, "trace_span", lambda **kw: spans.append(kw))
    agent_loop._publish_agent_loop_session(experiment_name="x", sample=1, session=0, trajectories=None)  # no exception
    s = agent_loop.agent_loop_session(experiment_name="x", sample=1, session=0, global_steps=2)
    s.finish(trajectories=[{"chain_id": 1, "reward_score": 1, "num_turns": 2, "status": "truncated"}], status="success")
    assert spans[0]["name"] == "agent_session" and spans[0]["attributes"]["num_trajectories"] == 1
    assert json.loads(spans[0]["attributes"]["trajectories"]) == [
        {"traj": "0", "reward": 1.0, "turns": 2, "status": "truncated"}
    ]


def test_a_turns_text_goes_with_its_span_cut_in_the_process(monkeypatch) -> None:
    """prompt= / response= of a generation, tool_args= / tool_result= of a tool call: span attributes, messages as
    JSON, each cut at 4,096 characters here (a 1 MB prompt is never queued whole); none sent when none given."""
    from rl_insight.client import agent_loop

    spans: list[dict] = []
    monkeypatch.setattr(agent_loop, "trace_span", lambda **kw: spans.append(kw))
    s = agent_loop.agent_loop_session(experiment_name="x", sample=1, session="s")
    messages = [{"role": "user", "content": "2+2?"}]
    s.generation(start_time_ns=1, end_time_ns=2, prompt=messages, response="x" * 1_000_000)
    s.tool_call("calc", start_time_ns=3, end_time_ns=4, tool_args={"expr": "2+2"}, tool_result="4")
    s.generation(start_time_ns=5, end_time_ns=6)
    gen, tool, bare = (sp["attributes"] for sp in spans)
    assert json.loads(gen["prompt"]) == messages
    assert len(gen["response"]) == 4096 and gen["response"].endswith("…")
    assert json.loads(tool["tool_args"]) == {"expr": "2+2"} and tool["tool_result"] == "4"
    assert not {"prompt", "response"} & set(bare)

"""The trajectory model end to end, over real HTTP into a real server: upstream's agent-loop protocol through the
public API, verl's rollout traces through real MLflow exported over OTLP (verl's own span shapes), vLLM request
spans joined to their generate turns, and turns that arrive out of order or twice."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import get_type_hints

import httpx
import pytest

from rl_insight.server.runstore import results
from tests.conftest import start_server

TOKEN = "traj-token"
H = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def srv(tmp_path: Path):
    s = start_server(tmp_path, token=TOKEN)
    yield s
    s.stop()


def _run_id(srv, experiment: str) -> int:
    srv.app.state.st.writer.flush(10)
    runs = httpx.get(srv.url + "/api/v1/runs", headers=H).json()["runs"]
    return next(r["id"] for r in runs if r["experiment_name"] == experiment)


def _get(srv, path: str, **params) -> dict:
    r = httpx.get(srv.url + path, params=params, headers=H)
    assert r.status_code == 200, r.text
    return r.json()


SESSION_JOB = r'''
import time, rl_insight
from rl_insight import agent_loop_session
rl_insight.init("agents", "react")
t0 = time.time_ns()
ms = 10**6
for step in (1, 2):
    rl_insight.metric_gauge("training/global_step", step, step=step)
    s = agent_loop_session(project="agents", experiment_name="react", sample=step, session="s", global_steps=step)
    for traj in range(3):
        base = t0 + step * 10_000 * ms
        slow = 5 if (step, traj) == (2, 1) else 1
        # the tool call is emitted before the generation that preceded it: arrival order must not matter
        s.tool_call("search" if traj else "python", traj=traj, turn=1, start_time_ns=base + 100 * ms,
                    end_time_ns=base + 100 * ms + 300 * slow * ms, error="timeout" if traj == 2 else None)
        s.generation(traj=traj, turn=0, start_time_ns=base, end_time_ns=base + 80 * ms, prompt_tokens=100,
                     completion_tokens=20, replica=f"replica_{traj % 2}", finish_reason="tool_calls", tools=["search"])
        end = base + 100 * ms + 300 * slow * ms
        s.generation(traj=traj, turn=2, start_time_ns=end + 20 * ms, end_time_ns=end + 120 * ms, prompt_tokens=180,
                     completion_tokens=40, replica=f"replica_{traj % 2}", finish_reason="stop",
                     request_id=f"vllm-{step}-{traj}")
    s.finish(trajectories=[{"chain_id": i + 1, "reward_score": i / 2, "num_turns": 3} for i in range(3)],
             status="success")
print("flushed", rl_insight.flush(10))
'''


def test_agent_loop_sessions_become_trajectories_per_step_with_turns_tools_and_gaps(srv) -> None:
    env = {**os.environ, "RL_INSIGHT_SERVER_URL": srv.url, "RL_INSIGHT_TOKEN": TOKEN}
    r = subprocess.run([sys.executable, "-c", SESSION_JOB], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "flushed True" in r.stdout, r.stdout + r.stderr
    rid = _run_id(srv, "react")
    base = f"/api/v1/runs/{rid}/trajectories"
    assert _get(srv, base + "/steps") == {"steps": [2, 1], "without_step": False}

    page = _get(srv, base)  # the newest step, slowest first
    assert page["step"] == 2 and page["total"] == 3
    slowest = page["trajectories"][0]
    assert slowest["key"].endswith("sample=2/session=s/traj=1#step=2") and slowest["duration_s"] == pytest.approx(1.72)
    assert (slowest["turns"], slowest["generates"], slowest["tool_calls"], slowest["tools"]) == (3, 2, 1, ["search"])
    assert (slowest["tokens_in"], slowest["tokens_out"], slowest["replica"], slowest["reward"]) == (
        280,
        60,
        "replica_1",
        0.5,
    )

    by_reward = _get(srv, base, step=1, sort="reward", desc="false")["trajectories"]
    assert [t["reward"] for t in by_reward] == [0.0, 0.5, 1.0]
    # a tool call failed, the trajectory still succeeded: found by "tool errors", not by "failed"
    assert _get(srv, base, step=1, failed="true")["total"] == 0
    erred = _get(srv, base, step=1, tool_errors="true")["trajectories"]
    assert [t["tool_errors"] for t in erred] == [1] and erred[0]["key"].endswith("traj=2#step=1")
    assert erred[0]["status"] not in ("error", "failed", "timeout")
    assert _get(srv, base, step=1, tool="python")["total"] == 1
    assert (
        _get(srv, base, step=2, sample="2")["total"] == 3 and _get(srv, base, step=2, sample="9")["total"] == 0
    )  # a rollout group
    assert (
        _get(srv, base, step=2, replica="replica_1")["trajectories"][0]["id"] == slowest["id"]
    )  # the long-tail link's query

    stats = _get(srv, base + "/stats", step=2)
    assert stats["trajectories"] == 3 and stats["turns"] == {"edges": [3, 4], "counts": [3]}
    search = next(t for t in stats["tools"] if t["tool"] == "search")
    assert (search["calls"], search["errors"], search["max_s"]) == (2, 1, pytest.approx(1.5))
    assert stats["replicas"][0]["replica"] == "replica_1"

    detail = _get(srv, f"{base}/{slowest['id']}")
    # the answers are what their documented types say, key for key (server/runstore/results.py)
    assert set(slowest) == set(get_type_hints(results.Trajectory))
    assert set(detail) == set(get_type_hints(results.TrajectoryDetail))
    assert [t["kind"] for t in detail["turn_list"]] == ["generate", "tool", "generate"]  # time order, not arrival order
    assert detail["turn_list"][0]["detail"]["finish_reason"] == "tool_calls"
    assert detail["gap_s"] == pytest.approx(0.04)  # 20 ms before the tool, 20 ms before the last generate

    # vLLM's span for the last generate, named by the engine's request id the session recorded
    doc = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "agents/react"}}]},
                "scopeSpans": [
                    {
                        "spans": [
                            _otlp_span(
                                "ef" * 16,
                                "0a" * 8,
                                "llm_request",
                                1,
                                2,
                                {
                                    "gen_ai.request.id": "vllm-2-1",
                                    "gen_ai.latency.time_in_queue": 0.25,
                                    "gen_ai.latency.time_in_model_decode": 0.07,
                                },
                            )
                        ]
                    }
                ],
            }
        ]
    }
    assert httpx.post(srv.url + "/v1/traces", json=doc, headers=H).status_code == 200
    srv.app.state.st.writer.flush(10)
    last = _get(srv, f"{base}/{slowest['id']}")["turn_list"][-1]
    assert last["request_id"] == "vllm-2-1" and last["engine"]["queue_s"] == 0.25 and last["replica"] == "replica_1"

    assert httpx.get(srv.url + f"{base}/999999", headers=H).status_code == 404
    assert httpx.get(srv.url + base, params={"sort": "x'; drop table runs"}, headers=H).status_code == 422
    assert httpx.get(srv.url + base).status_code == 401


# verl's rollout_trace with trace.backend=mlflow, as verl/utils/rollout_trace.py writes it: rollout_trace_attr opens a
# span named by the agent loop and tags the trace; rollout_trace_op wraps each call in a span named by its qualname
# with the bound arguments as inputs and the result as outputs.
MLFLOW_VERL_JOB = r'''
import asyncio, functools, inspect, time
import mlflow
mlflow.set_experiment("verl-agents")

def rollout_trace_op(func):
    @functools.wraps(func)
    async def wrapper(self, *args, **kwargs):
        inputs = dict(inspect.signature(func).bind(self, *args, **kwargs).arguments)
        del inputs["self"]
        with mlflow.start_span(name=func.__qualname__) as span:
            span.set_inputs(inputs)
            result = await func(self, *args, **kwargs)
            span.set_outputs(result)
        return result
    return wrapper

class AsyncLLMServerManager:
    @rollout_trace_op
    async def generate(self, request_id, *, prompt_ids, sampling_params):
        await asyncio.sleep(0.05)
        return {"token_ids": list(range(7)), "log_probs": None, "stop_reason": "completed"}

class SearchTool:
    @rollout_trace_op
    async def execute(self, instance_id, parameters, **kwargs):
        await asyncio.sleep(0.12)
        return {"text": "4"}, 0.0, {}

class ToolAgentLoop:
    @rollout_trace_op
    async def run(self, sampling_params, **kwargs):
        llm, tool = AsyncLLMServerManager(), SearchTool()
        await llm.generate(kwargs["request_id"], prompt_ids=list(range(300)), sampling_params=sampling_params)
        await tool.execute("i-1", {"query": "2+2"})
        await llm.generate(kwargs["request_id"], prompt_ids=list(range(320)), sampling_params=sampling_params)
        return {"num_turns": 4, "reward_score": 1.0, "response_ids": [1, 2, 3]}

async def trajectory(sample, request_id):
    with mlflow.start_span(name="tool_agent") as root:  # rollout_trace_attr
        mlflow.set_trace_tag(root.request_id, "step", "3")
        mlflow.set_trace_tag(root.request_id, "sample_index", str(sample))
        await ToolAgentLoop().run({"temperature": 1.0}, request_id=request_id, raw_prompt=["what is 2+2?"])

async def main():
    await asyncio.gather(trajectory(0, "req-a"), trajectory(1, "req-b"))

asyncio.run(main())
import mlflow.tracing.provider as provider
provider.provider.get().force_flush()
print("flushed")
'''


def _otlp_span(trace_id: str, span_id: str, name: str, start: int, end: int, attrs: dict, parent: str = "") -> dict:
    def value(v):
        return (
            {"intValue": str(v)}
            if isinstance(v, int)
            else {"doubleValue": v}
            if isinstance(v, float)
            else {"stringValue": str(v)}
        )

    return {
        "traceId": trace_id,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": name,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": [{"key": k, "value": value(v)} for k, v in attrs.items()],
    }


def test_real_mlflow_rollout_traces_and_vllm_requests_become_trajectories(srv, tmp_path: Path) -> None:
    """verl's trace.backend=mlflow with real MLflow over OTLP: one trajectory per trace, generate and tool turns from
    the qualnames, tokens from the inputs/outputs, the step from the run's clock (MLflow drops verl's tags); vLLM's
    request spans joined by request id and by parent span."""
    pytest.importorskip("mlflow")
    ident = {"project": "agents", "experiment_name": "verl-mlflow"}
    batch = {"v": 1, "client": {"id": "trainer", **ident}, "series": [{"k": "g", "n": "training/global_step", "l": {}}],
             "samples": [[0, time.time() - 1, 2, 2.0]]}  # step 2 done: step 3 in progress
    assert httpx.post(srv.url + "/api/v1/ingest", json=batch, headers=H).status_code == 200
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{srv.url}/v1/traces",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": f"Authorization=Bearer%20{TOKEN}",
        "OTEL_RESOURCE_ATTRIBUTES": "project=agents,experiment_name=verl-mlflow",
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
    }
    r = subprocess.run(
        [sys.executable, "-c", MLFLOW_VERL_JOB], env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path
    )
    assert r.returncode == 0 and "flushed" in r.stdout, r.stderr[-3000:]
    rid = _run_id(srv, "verl-mlflow")
    base = f"/api/v1/runs/{rid}/trajectories"
    page = _get(srv, base)
    assert page["step"] == 3 and page["total"] == 2, page  # the step from the run's clock
    t = page["trajectories"][0]
    assert t["key"].startswith("trace:") and (t["source"], t["reward"], t["reported_turns"]) == ("mlflow", 1.0, 4)
    assert (t["generates"], t["tool_calls"], t["tools"], t["tokens_in"], t["tokens_out"]) == (
        2,
        1,
        ["SearchTool"],
        620,
        14,
    )
    assert t["duration_s"] >= 0.2 and t["tool_s"] == pytest.approx(0.12, abs=0.08)
    detail = _get(srv, f"{base}/{t['id']}")
    gens = [x for x in detail["turn_list"] if x["kind"] == "generate"]
    assert [x["name"] for x in gens] == ["AsyncLLMServerManager.generate"] * 2
    sticky = {
        x["detail"]["verl.request_id"] for x in gens
    }  # verl's sticky-session id: the same for every turn, kept, never joined
    assert (
        sticky in ({"req-a"}, {"req-b"})
        and gens[0]["detail"]["finish_reason"] == "completed"
        and gens[0]["request_id"] is None
    )

    # vLLM's request spans, children of the generate spans (trace context propagated into the engine); one engine
    # retried
    trace_id = t["key"][6:]
    now = time.time_ns()
    vllm = {
        "resource": {
            "attributes": [
                {"key": "service.name", "value": {"stringValue": "agents/verl-mlflow"}},
                {"key": "service.instance.id", "value": {"stringValue": "replica_3"}},
            ]
        },
        "scopeSpans": [
            {
                "spans": [
                    _otlp_span(
                        trace_id,
                        "01" * 8,
                        "llm_request",
                        now,
                        now + 10**7,
                        {
                            "gen_ai.request.id": "vllm-1",
                            "gen_ai.latency.time_in_queue": 0.004,
                            "gen_ai.latency.time_in_model_prefill": 0.001,
                            "gen_ai.latency.time_in_model_decode": 0.04,
                            "gen_ai.usage.prompt_tokens": 300,
                            "gen_ai.usage.completion_tokens": 7,
                        },
                        parent=gens[0]["span_id"],
                    ),
                    _otlp_span(
                        trace_id,
                        "02" * 8,
                        "llm_request",
                        now,
                        now + 10**7,
                        {"gen_ai.request.id": "vllm-2", "gen_ai.latency.time_in_queue": 0.5},
                        parent=gens[1]["span_id"],
                    ),
                    _otlp_span(
                        trace_id,
                        "03" * 8,
                        "llm_request",
                        now + 10**7,
                        now + 2 * 10**7,
                        {"gen_ai.request.id": "vllm-2-retry", "gen_ai.latency.time_in_queue": 9.0},
                        parent=gens[1]["span_id"],
                    ),
                ]
            }
        ],
    }
    assert httpx.post(srv.url + "/v1/traces", json={"resourceSpans": [vllm]}, headers=H).status_code == 200
    srv.app.state.st.writer.flush(10)
    joined = _get(srv, f"{base}/{t['id']}")
    engines = [x["engine"] for x in joined["turn_list"] if x["kind"] == "generate"]
    assert len(joined["turn_list"]) == 3  # a retried request never doubles a turn
    assert engines[0]["queue_s"] == 0.004 and engines[0]["decode_s"] == 0.04 and engines[1]["queue_s"] == 0.5
    assert (
        joined["replica"] == "replica_3" and joined["tokens_in"] == 620
    )  # the turn's own count wins over the engine's


def test_otlp_turns_out_of_order_and_twice_make_one_trajectory(srv) -> None:
    ident = {"project": "agents", "experiment_name": "dupes", "step": 5}
    t0 = time.time_ns()
    spans = [
        _otlp_span(
            "cd" * 16,
            f"{i:016x}",
            name,
            t0 + i * 10**8,
            t0 + i * 10**8 + 5 * 10**7,
            {**ident, "mlflow.spanType": kind, "mlflow.traceRequestId": '"tr-1"', "prompt": "x" * 100_000},
        )
        for i, (name, kind) in enumerate(
            [("g", "LLM"), ("Calc.execute", "UNKNOWN"), ("g", "LLM"), ("Calc.execute", "TOOL")]
        )
    ]
    for chunk in (spans[2:][::-1], spans[:3], spans):  # reversed, overlapping, everything again
        assert (
            httpx.post(
                srv.url + "/v1/traces", json={"resourceSpans": [{"scopeSpans": [{"spans": chunk}]}]}, headers=H
            ).status_code
            == 200
        )
    rid = _run_id(srv, "dupes")
    page = _get(srv, f"/api/v1/runs/{rid}/trajectories")
    assert page["total"] == 1
    t = page["trajectories"][0]
    assert (t["turns"], t["generates"], t["tool_calls"], t["tools"], t["step"]) == (4, 2, 2, ["Calc"], 5)
    assert t["duration_s"] == pytest.approx(0.35)
    counts = httpx.get(srv.url + "/metrics").text
    assert 'rl_insight_server_otlp_intake_total{what="capped"}' in counts  # the 100 kB prompts were cut, not refused


def test_trajectories_that_came_before_the_first_step_metric_get_that_step(srv) -> None:
    """A run's first step logs its metric only at its end: MLflow spans of step 1 arrive before any clock exists and are
    listed without a step, until the clock's first move gives them the step it completed (and a later turn keeps it)."""
    ident = {"project": "agents", "experiment_name": "early"}
    t0 = time.time_ns() - 5 * 10**9
    mlflow = {"mlflow.spanType": "LLM", "mlflow.traceRequestId": '"tr-9"', **ident}

    def post(spans: list[dict]) -> None:
        assert (
            httpx.post(
                srv.url + "/v1/traces", json={"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}, headers=H
            ).status_code
            == 200
        )

    post([_otlp_span("9a" * 16, "0000000000000001", "g", t0, t0 + 10**8, mlflow)])
    rid = _run_id(srv, "early")
    assert _get(srv, f"/api/v1/runs/{rid}/trajectories/steps") == {"steps": [], "without_step": True}
    batch = {"v": 1, "client": {"id": "trainer", **ident}, "series": [{"k": "g", "n": "training/global_step", "l": {}}],
             "samples": [[0, time.time(), 1, 1.0]]}
    assert httpx.post(srv.url + "/api/v1/ingest", json=batch, headers=H).status_code == 200
    srv.app.state.st.writer.flush(10)
    assert _get(srv, f"/api/v1/runs/{rid}/trajectories/steps") == {"steps": [1], "without_step": False}
    post([_otlp_span("9a" * 16, "0000000000000002", "g", t0 + 2 * 10**8, t0 + 3 * 10**8, mlflow)])  # a later turn of it
    srv.app.state.st.writer.flush(10)
    page = _get(srv, f"/api/v1/runs/{rid}/trajectories", step=1)
    assert page["total"] == 1 and page["trajectories"][0]["turns"] == 2

"""OTLP trace intake (POST /v1/traces) with the real OpenTelemetry SDK exporter over OTLP/HTTP (protobuf, gzip)
and OTLP/JSON: spans land in the run store under the run their attributes, resource or service.name name,
spans without identity in a visible `unassigned` run, huge attributes capped and counted, the token required."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import start_server

TOKEN = "otlp-token"


@pytest.fixture
def srv(tmp_path: Path):
    s = start_server(tmp_path, token=TOKEN)
    yield s
    s.stop()


def _provider(url: str, service: str, token: str | None = TOKEN):
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", compression=Compression.Gzip,
                                headers={"Authorization": f"Bearer {token}"} if token else {})
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _runs(srv) -> dict[tuple[str, str], int]:
    srv.app.state.st.writer.flush(10)
    runs = httpx.get(srv.url + "/api/v1/runs", headers={"Authorization": f"Bearer {TOKEN}"}).json()["runs"]
    return {(r["project"], r["experiment_name"]): r["id"] for r in runs}


def _spans(srv, run_id: int) -> list[dict]:
    h = {"Authorization": f"Bearer {TOKEN}"}
    rows = httpx.get(
        f"{srv.url}/api/v1/runs/{run_id}/spans", params={"from_ns": 0, "to_ns": time.time_ns()}, headers=h
    ).json()["spans"]
    return [httpx.get(f"{srv.url}/api/v1/runs/{run_id}/spans/{row[6]}", headers=h).json() for row in rows]


def test_real_otel_sdk_spans_over_otlp_http_reach_their_run(srv) -> None:
    provider = _provider(srv.url, "verl-rollout")
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span(
        "trajectory",
        attributes={
            "project": "agents",
            "experiment_name": "react",
            "step": 3,
            "sample_index": 7,
            "rollout_n": 1,
            "validate": False,
        },
    ):
        with tracer.start_as_current_span("generate", attributes={"project": "agents", "experiment_name": "react",
                                                                 "prompt": "p" * 50_000}):
            pass
        with tracer.start_as_current_span("tool_call", attributes={"project": "agents", "experiment_name": "react",
                                                                  "tool": "search"}):
            pass
    mystery = _provider(srv.url, "mystery-service").get_tracer("t")
    with mystery.start_as_current_span("lonely"):
        pass
    refused = _provider(srv.url, "intruder", token=None).get_tracer("t")
    with refused.start_as_current_span("sneaky", attributes={"project": "agents", "experiment_name": "react"}):
        pass

    runs = _runs(srv)
    spans = {s["name"]: s for s in _spans(srv, runs[("agents", "react")])}
    assert set(spans) == {"trajectory", "generate", "tool_call"}  # the unauthenticated one was refused
    root = spans["trajectory"]
    assert root["attributes"]["step"] == 3 and root["attributes"]["sample_index"] == 7
    assert root["attributes"]["resource.service.name"] == "verl-rollout"
    assert spans["generate"]["parent_id"] == root["id"] and spans["generate"]["trace_id"] == root["trace_id"]
    assert spans["generate"]["lane"] == "otlp/verl-rollout"
    assert (root["kind"], spans["generate"]["kind"]) == ("state", "span")  # the root stands for the lane's state
    assert (
        spans["generate"]["attributes"]["prompt"].endswith("…")
        and len(spans["generate"]["attributes"]["prompt"]) <= 4096
    )
    # no identity: kept, visibly, under the unassigned project, named after its service
    assert [s["name"] for s in _spans(srv, runs[("unassigned", "mystery-service")])] == ["lonely"]
    metrics = httpx.get(srv.url + "/metrics").text
    assert 'rl_insight_server_otlp_intake_total{what="capped"} 1.0' in metrics
    assert 'rl_insight_server_otlp_intake_total{what="unassigned"} 1.0' in metrics


def test_otlp_json_gzip_and_hostile_bodies(srv) -> None:
    h = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    now = time.time_ns()
    doc = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "vllm/qwen-run"}}]},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "0af7651916cd43dd8448eb211c80319c",
                                "spanId": "b7ad6b7169203331",
                                "name": "llm_request",
                                "startTimeUnixNano": str(now - 10**9),
                                "endTimeUnixNano": str(now),
                                "attributes": [{"key": "gen_ai.usage.completion_tokens", "value": {"intValue": "42"}}],
                            },
                            {
                                "traceId": "0af7651916cd43dd8448eb211c80319c",
                                "spanId": "c7ad6b7169203331",
                                "name": "backwards",
                                "startTimeUnixNano": str(now),
                                "endTimeUnixNano": str(now - 5),
                            },
                        ]
                    }
                ],
            }
        ]
    }
    r = httpx.post(srv.url + "/v1/traces", content=gzip.compress(json.dumps(doc).encode()),
                   headers={**h, "Content-Encoding": "gzip"})
    assert (
        r.status_code == 200 and r.json()["partialSuccess"]["rejectedSpans"] == "1"
    )  # end before start: refused, said
    assert "before" in r.json()["partialSuccess"]["errorMessage"]
    spans = _spans(srv, _runs(srv)[("vllm", "qwen-run")])  # service.name "<project>/<experiment>"
    assert [s["name"] for s in spans] == ["llm_request"] and spans[0]["attributes"][
        "gen_ai.usage.completion_tokens"
    ] == 42
    for body, headers, status in [
        (b"not json", h, 400),
        (b"\x0a\xff\xff\xff", {**h, "Content-Type": "application/x-protobuf"}, 400),
        (b"[" * 100_000 + b"]" * 100_000, h, 400),
        (gzip.compress(b"0" * (20 * 2**20)), {**h, "Content-Encoding": "gzip"}, 413),
        (json.dumps(doc).encode(), {**h, "Content-Type": "text/plain"}, 415),
    ]:
        assert httpx.post(srv.url + "/v1/traces", content=body, headers=headers).status_code == status
    assert httpx.get(srv.url + "/healthz").status_code == 200


MLFLOW_JOB = r'''
import mlflow
mlflow.set_experiment("react")
# verl's rollout_trace with trace.backend=mlflow: a trajectory span carrying the step tags, one span per call
with mlflow.start_span(name="agent_loop") as root:
    mlflow.update_current_trace(tags={"step": "3", "sample_index": "7", "rollout_n": "1", "validate": "False"})
    root.set_inputs({"prompt": "what is 2+2?"})
    with mlflow.start_span(name="generate", span_type="LLM") as g:
        g.set_inputs({"prompt_ids": [1, 2, 3]})
        g.set_outputs({"text": "let me search", "tokens": 12})
    with mlflow.start_span(name="search", span_type="TOOL") as t:
        t.set_inputs({"query": "2+2"})
        t.set_outputs({"answer": 4})
    root.set_outputs({"reward": 1.0})
import mlflow.tracing.provider as provider
provider.provider.get().force_flush()
print("flushed")
'''


def test_real_mlflow_tracing_exported_over_otlp_lands_in_the_run(srv, tmp_path: Path) -> None:
    """What verl's mlflow trace backend sends, for real (full mlflow, local sqlite tracking URI, no MLflow server):
    the per-call spans with their inputs, outputs and span types reach the run named in OTEL_RESOURCE_ATTRIBUTES.
    (MLflow 3.17 loses the trajectory's root span on export, tags and all: docs/otlp.md.)"""
    pytest.importorskip("mlflow")
    import os
    import subprocess
    import sys

    env = {**os.environ, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{srv.url}/v1/traces",
           "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
           "OTEL_EXPORTER_OTLP_TRACES_HEADERS": f"Authorization=Bearer%20{TOKEN}",
           "OTEL_RESOURCE_ATTRIBUTES": "project=agents,experiment_name=mlflow-react",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    r = subprocess.run(
        [sys.executable, "-c", MLFLOW_JOB], env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path
    )
    assert r.returncode == 0 and "flushed" in r.stdout, r.stderr[-2000:]
    spans = {s["name"]: s for s in _spans(srv, _runs(srv)[("agents", "mlflow-react")])}
    gen, tool = spans["generate"], spans["search"]
    assert gen["trace_id"] == tool["trace_id"] and gen["parent_id"] == tool["parent_id"]  # one trajectory
    assert gen["attributes"]["mlflow.spanType"] == "LLM" and tool["attributes"]["mlflow.spanType"] == "TOOL"
    assert json.loads(gen["attributes"]["mlflow.spanInputs"]) == {"prompt_ids": [1, 2, 3]}
    assert json.loads(tool["attributes"]["mlflow.spanOutputs"]) == {"answer": 4}
    assert gen["attributes"]["mlflow.traceRequestId"].startswith("tr-")  # unquoted from MLflow's JSON encoding
    root = spans.get("agent_loop")
    if root is not None:  # an MLflow that exports the root: verl's tags under their own names
        assert root["attributes"]["step"] == "3" and root["attributes"]["sample_index"] == "7"


def test_spans_without_a_step_get_the_step_the_runs_clock_says_was_running(srv) -> None:
    """MLflow loses verl's step tag on export: the intake takes the step in progress at the span's start from the
    run's step clock (the step metric its trainer logs), and says so (`step_source: run_clock`)."""
    h = {"Authorization": f"Bearer {TOKEN}"}

    def log_step(step: int) -> None:
        batch = {
            "v": 1,
            "client": {"id": "trainer", "project": "agents", "experiment_name": "clocked"},
            "series": [{"k": "g", "n": "training/global_step", "l": {}}],
            "samples": [[0, time.time(), step, float(step)]],
        }
        assert httpx.post(srv.url + "/api/v1/ingest", json=batch, headers=h).status_code == 200

    before = time.time_ns() - 10**9  # before the run's clock remembers anything
    log_step(1)
    in_step_2 = time.time_ns() + 50_000_000
    time.sleep(0.2)
    log_step(2)
    in_step_3 = time.time_ns() + 50_000_000
    time.sleep(0.1)

    def span(name: str, start: int, extra: list | None = None) -> dict:
        return {"traceId": "1" * 32, "spanId": f"{abs(hash(name)) % 16**16:016x}", "name": name,
                "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 1000),
                "attributes": [{"key": "project", "value": {"stringValue": "agents"}},
                               {"key": "experiment_name", "value": {"stringValue": "clocked"}}, *(extra or [])]}

    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [
        span("early", before), span("mid", in_step_2), span("late", in_step_3),
        span("tagged", in_step_3, [{"key": "step", "value": {"intValue": "9"}}])]}]}]}
    assert httpx.post(srv.url + "/v1/traces", json=doc, headers=h).status_code == 200
    spans = {s["name"]: s["attributes"] for s in _spans(srv, _runs(srv)[("agents", "clocked")])}
    assert (spans["early"]["step"], spans["early"]["step_source"]) == (
        1,
        "run_clock",
    )  # before the first step metric: step 1
    assert (spans["mid"]["step"], spans["mid"]["step_source"]) == (2, "run_clock")
    assert spans["late"]["step"] == 3
    assert spans["tagged"]["step"] == 9 and "step_source" not in spans["tagged"]  # a span's own step wins


def test_the_step_clock_answers_the_step_in_progress_and_never_goes_back() -> None:
    from rl_insight.server.live.step_clock import StepClock

    c = StepClock()
    c.note("p", "e", 1, now=100.0)
    c.note("p", "e", 2, now=200.0)
    c.note("p", "e", 1, now=250.0)  # a late sample of an older step: the clock stays at 2
    c.note("p", "e", float("nan"))
    c.note("", "e", 5)
    assert c.current("p", "e") == (2, 200.0)
    # before the first move: the step that move completed (a run's first step logs its metric at its end)
    assert [c.step_at("p", "e", t) for t in (50.0, 100.0, 150.0, 200.0, 300.0)] == [1, 2, 2, 3, 3]
    c.note("p", "e", 3, now=150.0)  # another client's clock is behind: the history stays in time order
    assert c.step_at("p", "e", 210.0) == 4 and c.step_at("p", "e", 199.0) == 2
    assert c.step_at("other", "e", 150.0) is None
    c.forget({("p", "e")})
    assert c.current("p", "e") is None


def test_an_opentelemetry_only_runs_steps_are_covered_by_its_top_level_spans(srv) -> None:
    """A job that only speaks OpenTelemetry: its step clock is an OTLP gauge, its work OTLP spans. The outermost
    span of each process (no parent, or a remote one) stands for a state, so its steps are busy on the critical path
    and in the step table; a child under a local parent is not counted twice."""
    h = {"Authorization": f"Bearer {TOKEN}"}
    ident = [{"key": "project", "value": {"stringValue": "otel"}},
             {"key": "experiment_name", "value": {"stringValue": "only"}}]
    t0 = time.time_ns() - 60 * 10**9
    sec = 10**9  # the spans keep 50 ms from the step marks: a mark's time passes through a float
    points = [{"timeUnixNano": str(t0 + (4 * s) * sec), "asInt": str(s)} for s in range(1, 4)]
    metrics = {"resourceMetrics": [{"resource": {"attributes": ident}, "scopeMetrics": [{"metrics": [
        {"name": "training/global_step", "gauge": {"dataPoints": points}}]}]}]}
    assert httpx.post(srv.url + "/v1/metrics", json=metrics, headers=h).status_code == 200

    def span(sid: str, name: str, start_s: float, end_s: float, parent: str = "", flags: int = 0x100) -> dict:
        return {"traceId": sid * 32, "spanId": sid * 16, "parentSpanId": parent * 16 if parent else "", "name": name,
                "flags": flags, "startTimeUnixNano": str(t0 + int(start_s * sec)),
                "endTimeUnixNano": str(t0 + int(end_s * sec))}

    spans = [span("1", "train_step", 0.05, 3.9),            # step 1: a root span
             span("2", "forward", 0.1, 2.0, parent="1"),   # its child: a span, not a second state
             span("3", "train_step", 4.05, 7.9, parent="9", flags=0x300),  # step 2: a remote parent (a driver)
             span("4", "train_step", 8.05, 11.9)]           # step 3
    doc = {"resourceSpans": [{"resource": {"attributes": [*ident, {"key": "service.name",
                                                                   "value": {"stringValue": "trainer"}}]},
                              "scopeSpans": [{"spans": spans}]}]}
    assert httpx.post(srv.url + "/v1/traces", json=doc, headers=h).status_code == 200
    run = _runs(srv)[("otel", "only")]
    kinds = {(s["name"], s["start_ns"]): s["kind"] for s in _spans(srv, run)}
    assert kinds[("forward", t0 + sec // 10)] == "span"
    assert sorted(k for (n, _), k in kinds.items() if n == "train_step") == ["state"] * 3
    for step in (2, 3):
        path = httpx.get(f"{srv.url}/api/v1/runs/{run}/critical-path", params={"step": step}, headers=h).json()
        assert [e["name"] for e in path["elements"]] == ["train_step"], path
        assert path["bubbles_s"] < 0.2 * path["duration_s"], path  # not an idle step: the span covers it

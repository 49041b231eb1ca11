"""OTLP metrics intake with the real OpenTelemetry SDK (issue 26): a MeterProvider exporting over OTLP/HTTP and
OTLP/gRPC, with cumulative and delta temporality, lands as series of its run — exact totals on /metrics, samples in
the run store by step — and hostile bodies are refused with reasons, never a 500."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from rl_insight.server.intake.otlp_metrics import prometheus_name
from tests.conftest import RunningServer, free_port, start_server, wait_until

TOKEN = "otlp-metrics-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[RunningServer]:
    s = start_server(tmp_path, token=TOKEN, otlp_intake_grpc_port=free_port())
    yield s
    s.stop()


def _provider(exporter, experiment: str, delta: bool):
    from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider, UpDownCounter
    from opentelemetry.sdk.metrics.export import AggregationTemporality, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    if delta:  # (before the reader is made: it reads the exporter's preference once)
        exporter._preferred_temporality = {k: AggregationTemporality.DELTA for k in (Counter, Histogram, UpDownCounter)}
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=60_000)  # exported by force_flush
    chosen = {k.__name__: v for k, v in reader._instrument_class_temporality.items()}
    assert chosen["_Counter"] == (AggregationTemporality.DELTA if delta else AggregationTemporality.CUMULATIVE)
    res = Resource.create({"service.name": "nemo-rl-grpo", "project": "otel", "experiment_name": experiment})
    return MeterProvider(resource=res, metric_readers=[reader])


def _exercise(provider) -> None:
    meter = provider.get_meter("nemo_rl")
    tokens = meter.create_counter("train.tokens", unit="{token}", description="tokens trained on")
    loss = meter.create_gauge("train.loss", description="policy loss")
    step = meter.create_gauge("training/global_step")
    latency = meter.create_histogram("generation.latency", unit="s")
    queue = meter.create_up_down_counter("rollout.queue_depth")
    for i in range(1, 4):
        step.set(i)
        tokens.add(100, {"worker": "w0"})
        tokens.add(50, {"worker": "w1"})
        loss.set(1.0 / i, {"policy": "actor"})
        for v in (0.2, 0.7, 3.0):
            latency.record(v)
        queue.add(5)
        queue.add(-2)
        provider.force_flush()


def _metrics(srv: RunningServer) -> str:
    return httpx.get(srv.url + "/metrics", headers=AUTH).text


@pytest.mark.parametrize("transport,delta", [("http", False), ("http", True), ("grpc", False), ("grpc", True)])
def test_the_sdk_over_http_and_grpc_cumulative_and_delta(srv: RunningServer, transport: str, delta: bool) -> None:
    experiment = f"{transport}-{'delta' if delta else 'cumulative'}"
    if transport == "http":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter(endpoint=srv.url + "/v1/metrics", headers=AUTH)
    else:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcExporter

        exporter = GrpcExporter(endpoint=f"127.0.0.1:{srv.config.otlp_intake_grpc_port}", insecure=True,
                                headers=(("authorization", f"Bearer {TOKEN}"),))
    provider = _provider(exporter, experiment, delta)
    _exercise(provider)
    provider.shutdown()
    sel = f'experiment_name="{experiment}",project="otel"'
    text = _metrics(srv)
    # exact totals whatever the temporality: 3 exports of +100 / +50
    assert f'rl_insight_monitor_train_tokens_total{{{sel},worker="w0"}} 300.0' in text, text[-3000:]
    assert f'rl_insight_monitor_train_tokens_total{{{sel},worker="w1"}} 150.0' in text
    assert f'rl_insight_monitor_train_loss{{experiment_name="{experiment}",policy="actor",project="otel"}} ' \
           '0.3333333333333333' in text
    assert f'rl_insight_monitor_rollout_queue_depth{{{sel}}} 9.0' in text  # up-down: a gauge of the running value
    assert f'rl_insight_monitor_generation_latency_seconds_count{{{sel}}} 9.0' in text
    # the SDK's default bounds (0, 5, 10, …): the three values a round are all under 5 s
    bucket = f'rl_insight_monitor_generation_latency_seconds_bucket{{experiment_name="{experiment}",'
    assert bucket + 'le="0.0",project="otel"} 0.0' in text and bucket + 'le="5.0",project="otel"} 9.0' in text
    assert f'rl_insight_monitor_generation_latency_seconds_sum{{{sel}}} 11.7' in text
    # the run store: the run, its series, by step (the step gauge is the run's clock)
    runs = {r["experiment_name"]: r for r in httpx.get(srv.url + "/api/v1/runs", headers=AUTH).json()["runs"]}
    run = runs[experiment]
    wait_until(lambda: httpx.get(f"{srv.url}/api/v1/runs/{run['id']}", headers=AUTH).json()["last_step"] == 3,
               what="the step clock from the OTLP step gauge")
    series = httpx.get(f"{srv.url}/api/v1/runs/{run['id']}/series", headers=AUTH,
                       params={"name": "train_loss"}).json()["series"]
    assert [p[0] for p in series[0]["points"]][-1] == 3.0


def test_names_follow_the_otel_prometheus_exporter() -> None:
    assert prometheus_name("http.server.duration", "ms", "h") == "http_server_duration_milliseconds"
    assert prometheus_name("tokens", "{token}", "c") == "tokens"
    assert prometheus_name("requests_total", "", "c") == "requests"  # the exposition adds _total once
    assert prometheus_name("gpu.utilization", "1", "g") == "gpu_utilization_ratio"
    assert prometheus_name("net.io", "By/s", "g") == "net_io_bytes_per_seconds"
    assert prometheus_name("queue--depth", "", "g") == "queue_depth"
    assert prometheus_name("latency_seconds", "s", "h") == "latency_seconds"  # not doubled


def _post(srv: RunningServer, body: bytes, content_type: str = "application/json", **headers: str) -> httpx.Response:
    return httpx.post(srv.url + "/v1/metrics", content=body, headers={**AUTH, "Content-Type": content_type, **headers})


def _gauge_request(value: dict, name: str = "g", attrs: list | None = None,
                   time_ns: str = "1764547200000000000") -> bytes:
    return json.dumps({"resourceMetrics": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "p/e"}}]}, "scopeMetrics": [{"metrics": [
            {"name": name, "gauge": {"dataPoints": [{"timeUnixNano": time_ns, **value,
                                                     "attributes": attrs or []}]}}]}]}]}).encode()


def test_hostile_bodies_are_refused_with_reasons_and_the_rest_kept(srv: RunningServer) -> None:
    # OTLP/JSON, gzip: a good point is kept in the run named by service.name
    r = _post(srv, gzip.compress(_gauge_request({"asDouble": 2.5}, "ok_gauge")), **{"Content-Encoding": "gzip"})
    assert r.status_code == 200 and r.json() == {}
    assert 'rl_insight_monitor_ok_gauge{experiment_name="e",project="p"} 2.5' in _metrics(srv)
    # not OTLP at all, a gzip bomb, no token
    assert _post(srv, b"\x00\x01garbage", "application/x-protobuf").status_code == 400
    bomb = gzip.compress(b"{" * 10 + b" " * (200 << 20))
    assert _post(srv, bomb, **{"Content-Encoding": "gzip"}).status_code == 413
    assert httpx.post(srv.url + "/v1/metrics", content=_gauge_request({"asDouble": 1.0}),
                      headers={"Content-Type": "application/json"}).status_code == 401
    # NaN and infinite values: refused and counted, the series on /metrics untouched
    for bad in ("NaN", "Infinity", "-Infinity"):
        r = _post(srv, _gauge_request({"asDouble": bad}, "ok_gauge"))
        assert r.status_code == 200 and int(r.json()["partialSuccess"]["rejectedDataPoints"]) == 1, r.text
    assert 'rl_insight_monitor_ok_gauge{experiment_name="e",project="p"} 2.5' in _metrics(srv)
    # an out-of-range time and an exponential histogram: refused and counted, not a 500
    r = _post(srv, _gauge_request({"asDouble": 1.0}, "late", time_ns="18446744073709551615"))
    assert r.status_code == 200 and int(r.json()["partialSuccess"]["rejectedDataPoints"]) == 1
    exp = json.dumps({"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "x", "exponentialHistogram": {
        "dataPoints": [{"count": "1", "scale": 0}], "aggregationTemporality": 2}}]}]}]}).encode()
    r = _post(srv, exp)
    assert r.status_code == 200 and "exponential_histogram" in r.json()["partialSuccess"]["errorMessage"]
    # a key protobuf would read as an extension ("[…]", the API fuzz found it) is an unknown field: ignored
    body = json.loads(_gauge_request({"asDouble": 3.5}, "ok_gauge"))
    body["[x]"] = 1
    body["resourceMetrics"][0]["[ext.y]"] = {"a": []}
    r = _post(srv, json.dumps(body).encode())
    assert r.status_code == 200, r.text
    assert 'rl_insight_monitor_ok_gauge{experiment_name="e",project="p"} 3.5' in _metrics(srv)
    # a huge attribute set is capped, the point kept; no run identity: the visible unassigned run
    attrs = [{"key": f"k{i}", "value": {"stringValue": "v"}} for i in range(500)]
    body = json.loads(_gauge_request({"asInt": "7"}, "wide", attrs))
    del body["resourceMetrics"][0]["resource"]
    r = _post(srv, json.dumps(body).encode())
    assert r.status_code == 200
    wide = [line for line in _metrics(srv).splitlines() if line.startswith("rl_insight_monitor_wide{")]
    assert len(wide) == 1 and 'project="unassigned"' in wide[0] and wide[0].endswith(" 7.0")


def test_nemo_rl_telemetry_names_arrive_as_documented(srv: RunningServer) -> None:
    """The metric names NeMo-RL documents for its telemetry (rl.* through nemo-lens, gen_ai.* from the GenAI
    semantic conventions), as its driver would export them: each under the name docs/otel.md gives."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    provider = _provider(OTLPMetricExporter(endpoint=srv.url + "/v1/metrics", headers=AUTH), "nemo", False)
    meter = provider.get_meter("nemo_rl")
    meter.create_gauge("rl.efficiency").set(0.62, {"category": "generation"})
    meter.create_gauge("rl.setup.duration", unit="s").set(41.0, {"phase": "vllm_init"})
    meter.create_gauge("rl.reward.mean").set(0.41)
    meter.create_gauge("rl.policy.loss").set(0.02)
    meter.create_histogram("gen_ai.client.token.usage", unit="{token}").record(512, {"gen_ai.token.type": "output"})
    meter.create_histogram("gen_ai.client.operation.duration", unit="s").record(1.5)
    meter.create_histogram("rl.generation.duration_ms", unit="ms").record(1500)
    provider.force_flush()
    provider.shutdown()
    text = _metrics(srv)
    sel = 'experiment_name="nemo",project="otel"'
    for line in (f'rl_insight_monitor_rl_efficiency{{category="generation",{sel}}} 0.62',
                 'rl_insight_monitor_rl_setup_duration_seconds{experiment_name="nemo",phase="vllm_init",'
                 'project="otel"} 41.0',
                 f'rl_insight_monitor_rl_reward_mean{{{sel}}} 0.41',
                 f'rl_insight_monitor_rl_policy_loss{{{sel}}} 0.02',
                 'rl_insight_monitor_gen_ai_client_token_usage_count{experiment_name="nemo",gen_ai_token_type="output",'
                 'project="otel"} 1.0',
                 f'rl_insight_monitor_gen_ai_client_operation_duration_seconds_sum{{{sel}}} 1.5',
                 f'rl_insight_monitor_rl_generation_duration_ms_milliseconds_count{{{sel}}} 1.0'):
        assert line in text, line


SDK_PROGRAM = '''
from opentelemetry import metrics, trace
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

resource = Resource.create()  # from OTEL_RESOURCE_ATTRIBUTES
mp = MeterProvider(resource=resource, metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())])
tp = TracerProvider(resource=resource)
tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # endpoint, headers: from the environment
meter, tracer = mp.get_meter("job"), tp.get_tracer("job")
step, reward = meter.create_gauge("training/global_step"), meter.create_gauge("reward.mean")
for i in range(1, 4):
    with tracer.start_as_current_span("generate"):
        pass
    step.set(i)
    reward.set(i / 10)
    mp.force_flush()
tp.shutdown()
mp.shutdown()
'''


def test_an_sdk_program_with_only_environment_variables_is_a_run(srv: RunningServer, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": srv.url, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
           "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer%20{TOKEN}",
           "OTEL_RESOURCE_ATTRIBUTES": "project=sdk,experiment_name=env-only,service.name=grpo-job"}
    r = subprocess.run([sys.executable, "-c", SDK_PROGRAM], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    runs = {(x["project"], x["experiment_name"]): x for x in
            httpx.get(srv.url + "/api/v1/runs", headers=AUTH).json()["runs"]}
    run = runs[("sdk", "env-only")]
    assert run["last_step"] == 3
    pts = httpx.get(f"{srv.url}/api/v1/runs/{run['id']}/series", headers=AUTH,
                    params={"name": "reward_mean"}).json()["series"][0]["points"]
    assert [p[0] for p in pts] == [1.0, 2.0, 3.0] and pts[-1][1] == pytest.approx(0.3)  # charted by step
    wait_until(lambda: httpx.get(f"{srv.url}/api/v1/runs/{run['id']}/spans", headers=AUTH).json()["spans"],
               what="the program's spans on the timeline")
    lanes = httpx.get(f"{srv.url}/api/v1/runs/{run['id']}/lanes", headers=AUTH).json()["lanes"]
    assert {x["lane"] for x in lanes} == {"otlp/grpo-job"}


class _LosesSecondAnswer:
    """An HTTP hop that forwards every request to the server but answers the second one 503 (its commit went through,
    the answer did not: a slow store, a proxy timeout), which the OTel exporter retries."""

    def __init__(self, upstream: str) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        hop = self
        self.seen = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                r = httpx.post(upstream + self.path, content=body, headers={
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")})
                hop.seen += 1
                status, payload = (503, b"") if hop.seen == 2 else (r.status_code, r.content)
                self.send_response(status)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        import threading

        threading.Thread(target=self.http.serve_forever, daemon=True).start()


def test_a_delta_resent_after_a_503_is_counted_once(srv: RunningServer) -> None:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    hop = _LosesSecondAnswer(srv.url)
    try:
        provider = _provider(OTLPMetricExporter(endpoint=hop.url + "/v1/metrics", headers=AUTH), "resent", True)
        tokens = provider.get_meter("m").create_counter("tokens")
        for _ in range(3):
            tokens.add(5)
            provider.force_flush()
        provider.shutdown()
    finally:
        hop.http.shutdown()
    assert hop.seen >= 4  # three exports, the retry of the second (and what shutdown exports)
    text = _metrics(srv)
    assert 'rl_insight_monitor_tokens_total{experiment_name="resent",project="otel"} 15.0' in text, text[-2000:]
    runs = {r["experiment_name"]: r for r in httpx.get(srv.url + "/api/v1/runs", headers=AUTH).json()["runs"]}
    series = httpx.get(f"{srv.url}/api/v1/runs/{runs['resent']['id']}/series", headers=AUTH,
                       params={"name": "tokens", "x": "time"}).json()["series"]
    values = [p[1] for p in series[0]["points"]]
    assert values[:3] == [5.0, 10.0, 15.0] and set(values[3:]) <= {15.0}, values  # each once; shutdown's +0 after

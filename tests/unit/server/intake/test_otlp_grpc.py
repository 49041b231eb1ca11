"""OTLP/gRPC trace intake on its own port, with the real OpenTelemetry SDK gRPC exporter: spans reach their run and the
trajectory view, the token is required (UNAUTHENTICATED otherwise, names the fix), a busy port is a clear error."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx
import pytest

from rl_insight.errors import PortInUseError
from tests.conftest import free_port, start_server, wait_until

TOKEN = "grpc-token"
pytest.importorskip("grpc")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")


@pytest.fixture
def srv(tmp_path: Path):
    s = start_server(tmp_path, token=TOKEN, otlp_intake_grpc_port=free_port())
    yield s
    s.stop()


def _provider(port: int, token: str):
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    exporter = OTLPSpanExporter(
        endpoint=f"127.0.0.1:{port}", insecure=True, headers=(("authorization", f"Bearer {token}"),), timeout=5
    )
    provider = TracerProvider(resource=Resource.create({"service.name": "agents/grpc-run"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def test_spans_over_otlp_grpc_reach_their_run_and_trajectories(srv) -> None:
    port = srv.config.otlp_intake_grpc_port
    provider, _ = _provider(port, TOKEN)
    tracer = provider.get_tracer("verl")
    with tracer.start_as_current_span(
        "ToolAgentLoop.run", attributes={"mlflow.spanType": "AGENT", "mlflow.traceRequestId": "tr-1", "step": 6}
    ):
        with tracer.start_as_current_span("AsyncLLMServerManager.generate", attributes={"mlflow.spanType": "LLM",
                                                                                      "mlflow.traceRequestId": "tr-1"}):
            time.sleep(0.01)
        with tracer.start_as_current_span(
            "SearchTool.execute", attributes={"mlflow.spanType": "TOOL", "mlflow.traceRequestId": "tr-1"}
        ):
            time.sleep(0.01)
    provider.shutdown()
    h = {"Authorization": f"Bearer {TOKEN}"}

    def landed() -> bool:
        srv.app.state.st.writer.flush(10)
        runs = httpx.get(srv.url + "/api/v1/runs", headers=h).json()["runs"]
        return any(r["experiment_name"] == "grpc-run" for r in runs)

    wait_until(landed, timeout=20, what="gRPC spans in the run store")
    rid = next(
        r["id"]
        for r in httpx.get(srv.url + "/api/v1/runs", headers=h).json()["runs"]
        if r["experiment_name"] == "grpc-run"
    )
    page = httpx.get(f"{srv.url}/api/v1/runs/{rid}/trajectories", headers=h).json()
    assert page["step"] == 6 and page["total"] == 1
    t = page["trajectories"][0]
    assert (t["generates"], t["tool_calls"], t["tools"], t["source"]) == (1, 1, ["SearchTool"], "mlflow")
    assert (
        'rl_insight_server_ingest_items_accepted_total{section="otlp_spans"} 3.0'
        in httpx.get(srv.url + "/metrics").text
    )


def test_the_token_is_required_and_named(srv) -> None:
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{srv.config.otlp_intake_grpc_port}") as ch:
        stub = trace_service_pb2_grpc.TraceServiceStub(ch)
        for metadata in ((), (("authorization", "Bearer wrong"),)):
            with pytest.raises(grpc.RpcError) as err:
                stub.Export(trace_service_pb2.ExportTraceServiceRequest(), metadata=metadata, timeout=5)
            assert (
                err.value.code() == grpc.StatusCode.UNAUTHENTICATED
                and "OTEL_EXPORTER_OTLP_TRACES_HEADERS" in err.value.details()
            )
        ok = stub.Export(
            trace_service_pb2.ExportTraceServiceRequest(), metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=5
        )
        assert not ok.HasField("partial_success")
        # a message over the body limit is refused by gRPC itself, and the server answers the next one
        big = trace_service_pb2.ExportTraceServiceRequest()
        big.resource_spans.add().scope_spans.add().spans.add(name="x" * (srv.config.max_body_bytes + 10))
        with pytest.raises(grpc.RpcError) as err:
            stub.Export(big, metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=10)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert httpx.get(srv.url + "/healthz").status_code == 200


def test_a_busy_port_is_a_clear_error(tmp_path: Path) -> None:
    from rl_insight.server.intake.otlp_grpc import GrpcTraceIntake

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        srv = start_server(tmp_path)
        try:
            with pytest.raises(PortInUseError, match=f"{port}"):
                st = srv.app.state.st
                GrpcTraceIntake(st.intake, st.auth, "127.0.0.1", port, max_body_bytes=st.config.max_body_bytes,
                                ack_timeout_s=st.config.ack_timeout_s).start()
        finally:
            srv.stop()

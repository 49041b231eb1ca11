"""Span forwarding to Tempo over OTLP, checked by in-process receivers that decode the real protobuf
messages (`opentelemetry-proto`), over HTTP and over gRPC."""

from __future__ import annotations

import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

import rl_insight
from tests.conftest import free_port, start_server, wait_until


class Received:
    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []

    def spans(self) -> list[tuple[dict, object]]:
        out = []
        for req in self.requests:
            for rs in req.resource_spans:
                resource = {a.key: a.value.string_value for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for sp in ss.spans:
                        out.append((resource, sp))
        return out


@pytest.fixture
def http_receiver():
    got = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            assert self.path == "/v1/traces" and self.headers["Content-Type"] == "application/x-protobuf"
            got.requests.append(trace_service_pb2.ExportTraceServiceRequest.FromString(body))
            out = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *a: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", got
    srv.shutdown()


@pytest.fixture
def grpc_receiver():
    got = Received()

    class Service(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):
            got.requests.append(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"http://127.0.0.1:{port}", got
    server.stop(0)


def emit(url: str, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", url)
    rl_insight.init(project="p", experiment_name="e")
    with rl_insight.trace_state("train_batch", state_lane_id="rank_0", stage="x"):
        with rl_insight.trace_state("actor_update", state_lane_id="rank_0"):
            time.sleep(0.005)
    assert rl_insight.flush(5)


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_spans_reach_the_receiver_with_ids_parents_timestamps_and_attributes(
    tmp_path, monkeypatch, protocol, http_receiver, grpc_receiver
) -> None:
    endpoint, got = http_receiver if protocol == "http/protobuf" else grpc_receiver
    srv = start_server(tmp_path, otlp_endpoint=endpoint, otlp_protocol=protocol)
    try:
        emit(srv.url, monkeypatch)
        assert srv.app.state.st.forwarder.flush(10)
        wait_until(lambda: len(got.spans()) >= 2, what="spans at the OTLP receiver")
        sent = {s["name"]: s for s in httpx.get(srv.url + "/api/v1/spans/recent").json()["spans"]}
        by_name = {sp.name: (res, sp) for res, sp in got.spans()}
        res, parent = by_name["train_batch"]
        _, child = by_name["actor_update"]
        assert res["service.name"] == "rl_insight_monitor" and (res["project"], res["experiment_name"]) == ("p", "e")
        assert res["host.name"]
        assert (
            parent.span_id.hex() == sent["train_batch"]["id"]
            and parent.trace_id.hex() == sent["train_batch"]["trace_id"]
        )
        assert (
            child.parent_span_id == parent.span_id and child.trace_id == parent.trace_id and not parent.parent_span_id
        )
        assert parent.start_time_unix_nano == sent["train_batch"]["start_ns"]
        assert parent.end_time_unix_nano == sent["train_batch"]["end_ns"]
        attrs = {a.key: a.value.string_value for a in parent.attributes}
        assert attrs["state_name"] == "train_batch" and attrs["state_lane_id"] == "rank_0" and attrs["stage"] == "x"
        assert attrs["monitor.trace_segment"] == "state_interval" and attrs["process_id"]
        text = httpx.get(srv.url + "/metrics").text
        assert "rl_insight_server_otlp_spans_sent_total 2.0" in text
    finally:
        srv.stop()


def test_receiver_down_never_blocks_ingest_and_drops_are_counted(tmp_path, monkeypatch) -> None:
    srv = start_server(tmp_path, otlp_endpoint=f"http://127.0.0.1:{free_port()}", otlp_queue=5)
    try:
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", srv.url)
        rl_insight.init(project="p", experiment_name="e")
        t0 = time.perf_counter()
        for i in range(60):
            with rl_insight.trace_state(f"s{i % 3}", state_lane_id=f"rank_{i}"):
                pass
        assert rl_insight.flush(10)
        assert time.perf_counter() - t0 < 5  # ingest answered although nothing receives the spans
        f = srv.app.state.st.forwarder
        wait_until(lambda: f.dropped.get("queue_full", 0) + f.dropped.get("export_failed", 0) >= 55, timeout=30,
                   what="dropped spans counted")
        assert f.sent == 0
        assert len(httpx.get(srv.url + "/api/v1/spans/recent", params={"limit": 100}).json()["spans"]) == 60
    finally:
        srv.stop()


def test_standard_otel_environment_is_honoured(tmp_path, monkeypatch, http_receiver) -> None:
    endpoint, got = http_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint + "/v1/traces")
    srv = start_server(tmp_path)  # no otlp_endpoint in the config
    try:
        emit(srv.url, monkeypatch)
        assert srv.app.state.st.forwarder is not None and srv.app.state.st.forwarder.flush(10)
        wait_until(
            lambda: {sp.name for _, sp in got.spans()} >= {"train_batch", "actor_update"}, what="spans via OTEL env"
        )
    finally:
        srv.stop()


def test_grpc_without_its_extra_is_a_clear_error(monkeypatch) -> None:
    import sys

    from rl_insight.errors import ConfigError
    from rl_insight.server.outbound.otlp import OtlpForwarder

    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc.trace_exporter", None)  # not installed
    with pytest.raises(ConfigError, match=r'rl-insight\[grpc\]'):
        OtlpForwarder("http://127.0.0.1:4317", "grpc")


@pytest.mark.socket  # (forwards to an OTLP receiver's address)
def test_forwarding_queue_is_bounded_by_bytes_too() -> None:
    from rl_insight.protocol import SpanRecord
    from rl_insight.server.outbound.otlp import OtlpForwarder

    f = OtlpForwarder(
        "http://127.0.0.1:9/v1/traces", max_queue=1_000_000, max_queue_bytes=100_000, flush_interval_s=3600
    )
    try:
        f.add([SpanRecord(f"s{i}", "t", None, "n", None, "span", 1, 2, {}, size=10_000) for i in range(50)], "h")
        assert f.queued == 10 and f.dropped["queue_full"] == 40
    finally:
        f.shutdown(0.1)

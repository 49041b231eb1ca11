"""OTLP/gRPC trace intake on a port of its own (`--otlp-intake-grpc-port`; off by default): for exporters that
speak only gRPC (MLflow's and most SDKs' default protocol). Same auth as ingest (`authorization: Bearer <token>`
metadata, which `OTEL_EXPORTER_OTLP_TRACES_HEADERS` sets), same mapping and sinks as `POST /v1/traces`
(the intake pipeline's `otlp`), answered once the run store committed the spans.

Bounded and never blocking: messages over the body limit are refused by gRPC itself (RESOURCE_EXHAUSTED),
at most `MAX_CONCURRENT` exports run at once (more are refused the same way, and the exporter retries), on
a small thread pool of its own. SO_REUSEPORT is off, so a busy port is an error, not a silently shared one.
"""

from __future__ import annotations

import logging
from concurrent import futures
from typing import Any

from ...errors import BusyError, MalformedBodyError, PortInUseError
from ..security import Auth
from .ingest import wait_stored
from .otlp import pb_spans
from .pipeline import IntakePipeline

log = logging.getLogger("rl_insight.server.intake.otlp_grpc")
MAX_CONCURRENT = 32
WORKERS = 4


class GrpcTraceIntake:
    def __init__(self, intake: IntakePipeline, auth: Auth, host: str, port: int, *, max_body_bytes: int,
                 ack_timeout_s: float, metrics: Any = None) -> None:
        self.intake, self.auth, self.host, self.port = intake, auth, host, port
        self.metrics = metrics  # intake/otlp_metrics.OtlpMetrics: the metrics service's converter
        self.max_body_bytes, self.ack_timeout_s = max_body_bytes, ack_timeout_s
        self._server: Any = None
        self.bound_port = 0

    def start(self) -> None:
        """Bind and serve; PortInUseError when the port is taken, ServiceError-like ImportError when grpc is missing."""
        import grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

        intake, auth, ack_timeout_s = self.intake, self.auth, self.ack_timeout_s

        def authenticate(context: Any, signal: str) -> frozenset[str] | None:
            """The ingest token, as the HTTP intake wants it; the projects it may write (None: any)."""
            if not auth.token:
                return None
            meta = dict(context.invocation_metadata())
            scheme, _, supplied = str(meta.get("authorization", "")).partition(" ")
            who = auth.resolve(supplied) if scheme.lower() == "bearer" else None
            if who is None or not who.can_ingest:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token: set "
                              f"OTEL_EXPORTER_OTLP_{signal}_HEADERS=Authorization=Bearer%20<token>")
            return who.projects if who is not None else frozenset()

        class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:  # gRPC's method name
                projects = authenticate(context, "TRACES")
                try:
                    got = intake.otlp(pb_spans(request), True, projects)
                    wait_stored(intake.writer, got.receipt, ack_timeout_s)  # answered once stored, like the HTTP intake
                except MalformedBodyError as exc:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, exc.message)
                except BusyError as exc:  # UNAVAILABLE: the exporter retries
                    context.abort(grpc.StatusCode.UNAVAILABLE, exc.message)
                except RecursionError:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "OTLP request nested too deeply")
                answer = trace_service_pb2.ExportTraceServiceResponse()
                if got.rejected:
                    answer.partial_success.rejected_spans = got.rejected
                    answer.partial_success.error_message = got.error[:1000]
                return answer

        converter = self.metrics

        class MetricsService(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:  # gRPC's method name
                projects = authenticate(context, "METRICS")
                try:
                    batches, counts = converter.to_batches(request)
                    got = intake.otlp_metrics(batches, counts, projects)
                    wait_stored(intake.writer, got.receipt, ack_timeout_s)
                except BusyError as exc:
                    context.abort(grpc.StatusCode.UNAVAILABLE, exc.message)
                answer = metrics_service_pb2.ExportMetricsServiceResponse()
                if got.rejected:
                    answer.partial_success.rejected_data_points = got.rejected
                    answer.partial_success.error_message = got.error[:1000]
                return answer

        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="rl-insight-otlp-grpc"),
            maximum_concurrent_rpcs=MAX_CONCURRENT,
            options=[("grpc.max_receive_message_length", self.max_body_bytes), ("grpc.so_reuseport", 0)])
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(MetricsService(), server)
        address = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        try:
            self.bound_port = server.add_insecure_port(address)
        except RuntimeError:
            self.bound_port = 0
        if not self.bound_port:
            server.stop(None)
            raise PortInUseError(
                f"cannot bind the OTLP/gRPC intake on {address} (port in use or not permitted)",
                hint="choose another --otlp-intake-grpc-port; Tempo's own OTLP receiver uses 4317 on loopback",
            )
        server.start()
        self._server = server
        log.info("OTLP/gRPC trace intake on %s", address)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=2).wait(3)
            self._server = None

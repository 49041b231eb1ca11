"""OTLP/gRPC trace intake on a port of its own (`--otlp-intake-grpc-port`; off by default): for exporters that
speak only gRPC (MLflow's and most SDKs' default protocol). Same auth as ingest (`authorization: Bearer <token>`
metadata, which `OTEL_EXPORTER_OTLP_TRACES_HEADERS` sets), same mapping and sinks as `POST /v1/traces`
(otlp_intake.receive_spans).

Bounded and never blocking: messages over the body limit are refused by gRPC itself (RESOURCE_EXHAUSTED),
at most `MAX_CONCURRENT` exports run at once (more are refused the same way, and the exporter retries), on
a small thread pool of its own. SO_REUSEPORT is off, so a busy port is an error, not a silently shared one.
"""

from __future__ import annotations

import logging
from concurrent import futures
from typing import Any

from ...errors import BusyError, MalformedBodyError, PortInUseError
from .ingest import wait_stored
from .otlp import pb_spans, receive_spans

log = logging.getLogger("rl_insight.server.intake.otlp_grpc")
MAX_CONCURRENT = 32
WORKERS = 4


class GrpcTraceIntake:
    def __init__(self, st: Any, host: str, port: int) -> None:
        self.st, self.host, self.port = st, host, port
        self._server: Any = None
        self.bound_port = 0

    def start(self) -> None:
        """Bind and serve; PortInUseError when the port is taken, ServiceError-like ImportError when grpc is missing."""
        import grpc
        from opentelemetry.proto.collector.trace.v1 import (
            trace_service_pb2,
            trace_service_pb2_grpc,
        )

        st = self.st

        class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC's method name
                if st.auth.token:
                    meta = dict(context.invocation_metadata())
                    scheme, _, supplied = str(meta.get("authorization", "")).partition(" ")
                    if scheme.lower() != "bearer" or not st.auth.token_ok(supplied):
                        context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                      "missing or wrong bearer token: set OTEL_EXPORTER_OTLP_TRACES_HEADERS=Authorization=Bearer%20<token>")
                try:
                    accepted, rejected, error, durable = receive_spans(st, pb_spans(request), True)
                    wait_stored(durable, st.config.ack_timeout_s)  # answered once stored, like the HTTP intake
                except MalformedBodyError as exc:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, exc.message)
                except BusyError as exc:  # UNAVAILABLE: the exporter retries
                    context.abort(grpc.StatusCode.UNAVAILABLE, exc.message)
                except RecursionError:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "OTLP request nested too deeply")
                answer = trace_service_pb2.ExportTraceServiceResponse()
                if rejected:
                    answer.partial_success.rejected_spans = rejected
                    answer.partial_success.error_message = error[:1000]
                return answer

        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="rl-insight-otlp-grpc"),
            maximum_concurrent_rpcs=MAX_CONCURRENT,
            options=[("grpc.max_receive_message_length", st.config.max_body_bytes), ("grpc.so_reuseport", 0)])
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(), server)
        address = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        try:
            self.bound_port = server.add_insecure_port(address)
        except RuntimeError:
            self.bound_port = 0
        if not self.bound_port:
            server.stop(None)
            raise PortInUseError(f"cannot bind the OTLP/gRPC intake on {address} (port in use or not permitted)",
                                 hint="choose another --otlp-intake-grpc-port; Tempo's own OTLP receiver uses 4317 on loopback")
        server.start()
        self._server = server
        log.info("OTLP/gRPC trace intake on %s", address)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=2).wait(3)
            self._server = None

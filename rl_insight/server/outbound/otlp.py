"""Forward finished spans to Tempo (or any OTLP receiver) with the OpenTelemetry SDK exporters.

Spans keep their original ids, parent links and timestamps: they are handed to the exporter as
finished `ReadableSpan`s, grouped by resource (`service.name=rl_insight_monitor`, `project`,
`experiment_name`, `host.name`). A bounded queue and one background thread: when the receiver is
down or slow, the oldest spans are dropped and counted; ingest never waits.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any, Sequence

from ...protocol import SpanRecord
from ..workers.batch_worker import BatchWorker

log = logging.getLogger("rl_insight.server.outbound.otlp")
SERVICE_NAME = "rl_insight_monitor"


def _id(value: Any, bits: int) -> int:
    """Our ids are hex; anything else (a client's own ids) is hashed to the right width, never zero."""
    try:
        n = int(str(value), 16)
        if 0 < n < (1 << bits):
            return n
    except (TypeError, ValueError):
        pass
    digest = hashlib.sha256(str(value).encode()).digest()
    return int.from_bytes(digest[: bits // 8], "big") or 1


def _attr(v: Any) -> Any:
    if isinstance(v, (str, bool, int, float)):
        return v
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, (str, bool, int, float)) for x in v) \
            and len({type(x) for x in v}) == 1:
        return list(v)
    return str(v)


def require_grpc() -> Any:
    """The gRPC OTLP exporter (extra `rl-insight[grpc]`: grpcio is large, so it is not a default dependency)."""
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    except ImportError:
        from ...errors import ConfigError

        raise ConfigError(
            "OTLP over gRPC needs the gRPC exporter, which is not installed",
            hint='pip install "rl-insight[grpc]", or use --otlp-protocol http/protobuf (the default)',
        ) from None
    return OTLPSpanExporter


def endpoint_from_env() -> str | None:
    return os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None


class OtlpForwarder:
    def __init__(self, endpoint: str | None, protocol: str = "http/protobuf", max_queue: int = 50_000,
                 max_queue_bytes: int = 64 * 2**20,
                 batch_size: int = 512, flush_interval_s: float = 1.0, timeout_s: float = 5.0) -> None:
        self.endpoint = endpoint
        self.protocol = protocol
        self._exporter = self._make_exporter(endpoint, protocol, timeout_s)
        self.sent = 0
        self.failures = 0
        self._resources: dict[tuple[str, str, str, str], Any] = {}
        # oldest spans go first when full (by count, and by size: spans carry up to 16 KiB of attributes)
        self._worker: BatchWorker[tuple[SpanRecord, tuple[str, str]]] = BatchWorker(
            "otlp", self._export, max_weight=max_queue, max_batch_weight=batch_size, interval_s=flush_interval_s,
            max_bytes=max_queue_bytes, size=lambda item: item[0].size, overflow="drop_oldest")

    @property
    def dropped(self) -> dict[str, int]:
        return self._worker.dropped

    @property
    def queued(self) -> int:
        return len(self._worker)

    @staticmethod
    def _make_exporter(endpoint: str | None, protocol: str, timeout_s: float) -> Any:
        if protocol == "grpc":
            GrpcExporter = require_grpc()

            target = endpoint.split("://", 1)[-1] if endpoint else None
            return (
                GrpcExporter(endpoint=target, insecure=True, timeout=timeout_s)
                if target
                else GrpcExporter(timeout=timeout_s)
            )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

        if endpoint and not endpoint.rstrip("/").endswith("/v1/traces"):
            endpoint = endpoint.rstrip("/") + "/v1/traces"
        return HttpExporter(endpoint=endpoint, timeout=timeout_s) if endpoint else HttpExporter(timeout=timeout_s)

    def add(self, spans: Sequence[SpanRecord], host: str, service: str | None = None) -> None:
        """Queue finished spans (open states are not exported: Tempo stores completed spans)."""
        origin = (host, service or SERVICE_NAME)
        for s in spans:
            if s.end_ns is not None:
                self._worker.put((s, origin))

    def flush(self, timeout: float = 10.0) -> bool:
        return self._worker.flush(timeout)

    def shutdown(self, timeout: float = 5.0) -> None:
        self._worker.stop(timeout)
        try:
            self._exporter.shutdown()
        except Exception:  # shutting down: nothing left to report to
            pass

    # ------------------------------------------------------------------ exporter thread
    def _resource(self, attrs: dict[str, Any], origin: tuple[str, str] | str) -> Any:
        from opentelemetry.sdk.resources import Resource

        host, service = origin if isinstance(origin, tuple) else (origin, SERVICE_NAME)
        key = (str(attrs.get("project", "")), str(attrs.get("experiment_name", "")), host, service)
        res = self._resources.get(key)
        if res is None:
            res = self._resources[key] = Resource.create({"service.name": service, "project": key[0],
                                                          "experiment_name": key[1], "host.name": host})
        return res

    def _to_readable(self, span: SpanRecord, host: tuple[str, str] | str) -> Any:
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

        trace_id = _id(span.trace_id or span.id, 128)
        ctx = SpanContext(trace_id=trace_id, span_id=_id(span.id, 64), is_remote=False, trace_flags=TraceFlags(1))
        parent = None
        if span.parent_id:
            parent = SpanContext(
                trace_id=trace_id, span_id=_id(span.parent_id, 64), is_remote=False, trace_flags=TraceFlags(1)
            )
        attrs = {k: _attr(v) for k, v in span.attributes.items() if v is not None}
        if span.lane:
            attrs.setdefault("state_lane_id", span.lane)
        attrs.setdefault("monitor.span_kind", span.kind or "span")
        return ReadableSpan(name=span.name, context=ctx, parent=parent, resource=self._resource(attrs, host),
                            attributes=attrs, kind=SpanKind.INTERNAL, start_time=span.start_ns,
                            end_time=span.end_ns, instrumentation_scope=InstrumentationScope("rl_insight"))

    def _export(self, batch: list[tuple[SpanRecord, tuple[str, str]]]) -> bool:
        """The worker thread: one batch to the receiver; False (back off until the next interval) when it failed."""
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = self._exporter.export([self._to_readable(s, h) for s, h in batch])
        except Exception as exc:  # the exporter must never take the thread down
            log.warning("OTLP export failed: %s", exc)
            result = None
        if result == SpanExportResult.SUCCESS:
            self.sent += len(batch)
            self.failures = 0
            return True
        self.failures += 1
        self._worker.drop("export_failed", len(batch))
        if self.failures in (1, 10, 100) or self.failures % 1000 == 0:
            log.warning("OTLP receiver %s refused or did not answer (%d failures); %d spans dropped",
                        self.endpoint or "(from OTEL_* env)", self.failures, len(batch))
        return False

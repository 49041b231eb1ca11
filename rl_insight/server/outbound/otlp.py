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
import threading
import time
from collections import deque
from typing import Any, Sequence

from ...protocol import SpanRecord

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

        raise ConfigError("OTLP over gRPC needs the gRPC exporter, which is not installed",
                          hint='pip install "rl-insight[grpc]", or use --otlp-protocol http/protobuf (the default)') from None
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
        self._queue: deque[tuple[SpanRecord, str]] = deque()
        self._max = max_queue
        self._max_bytes = max_queue_bytes  # spans carry up to 16 KiB of attributes: bound by size too
        self._queued_bytes = 0
        self._batch = batch_size
        self._interval = flush_interval_s
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self.sent = 0
        self.dropped: dict[str, int] = {}
        self.failures = 0
        self._resources: dict[tuple[str, str, str], Any] = {}
        self._thread = threading.Thread(target=self._run, name="rl-insight-otlp", daemon=True)
        self._thread.start()

    @staticmethod
    def _make_exporter(endpoint: str | None, protocol: str, timeout_s: float) -> Any:
        if protocol == "grpc":
            GrpcExporter = require_grpc()

            target = endpoint.split("://", 1)[-1] if endpoint else None
            return GrpcExporter(endpoint=target, insecure=True, timeout=timeout_s) if target else GrpcExporter(timeout=timeout_s)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

        if endpoint and not endpoint.rstrip("/").endswith("/v1/traces"):
            endpoint = endpoint.rstrip("/") + "/v1/traces"
        return HttpExporter(endpoint=endpoint, timeout=timeout_s) if endpoint else HttpExporter(timeout=timeout_s)

    def _drop(self, reason: str, n: int) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + n

    def add(self, spans: Sequence[SpanRecord], host: str, service: str | None = None) -> None:
        """Queue finished spans (open states are not exported: Tempo stores completed spans)."""
        with self._lock:
            for s in spans:
                if s.end_ns is None:
                    continue
                while self._queue and (len(self._queue) >= self._max or self._queued_bytes + s.size > self._max_bytes):
                    gone, _ = self._queue.popleft()
                    self._queued_bytes -= gone.size
                    self._drop("queue_full", 1)
                self._queue.append((s, (host, service or SERVICE_NAME)))
                self._queued_bytes += s.size
        if len(self._queue) >= self._batch:
            self._wake.set()

    def flush(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._queue and not getattr(self, "_busy", False):
                    return True
            self._wake.set()
            time.sleep(0.02)
        return False

    def shutdown(self) -> None:
        self.flush(5.0)
        self._stop = True
        self._wake.set()
        self._thread.join(5)
        try:
            self._exporter.shutdown()
        except Exception:
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
            parent = SpanContext(trace_id=trace_id, span_id=_id(span.parent_id, 64), is_remote=False, trace_flags=TraceFlags(1))
        attrs = {k: _attr(v) for k, v in span.attributes.items() if v is not None}
        if span.lane:
            attrs.setdefault("state_lane_id", span.lane)
        attrs.setdefault("monitor.span_kind", span.kind or "span")
        return ReadableSpan(name=span.name, context=ctx, parent=parent, resource=self._resource(attrs, host),
                            attributes=attrs, kind=SpanKind.INTERNAL, start_time=span.start_ns,
                            end_time=span.end_ns, instrumentation_scope=InstrumentationScope("rl_insight"))

    def _run(self) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        while not self._stop:
            self._wake.wait(self._interval)
            self._wake.clear()
            while True:
                with self._lock:
                    if not self._queue:
                        break
                    n = min(self._batch, len(self._queue))
                    batch = [self._queue.popleft() for _ in range(n)]
                    self._queued_bytes -= sum(sp.size for sp, _ in batch)
                    self._busy = True
                try:
                    result = self._exporter.export([self._to_readable(s, h) for s, h in batch])
                except Exception as exc:  # the exporter must never take the thread down
                    log.warning("OTLP export failed: %s", exc)
                    result = None
                finally:
                    self._busy = False
                if result == SpanExportResult.SUCCESS:
                    self.sent += len(batch)
                    self.failures = 0
                else:
                    self.failures += 1
                    self._drop("export_failed", len(batch))
                    if self.failures in (1, 10, 100) or self.failures % 1000 == 0:
                        log.warning("OTLP receiver %s refused or did not answer (%d failures); %d spans dropped",
                                    self.endpoint or "(from OTEL_* env)", self.failures, len(batch))
                    break  # back off until the next interval

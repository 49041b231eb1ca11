"""POST /v1/traces: OTLP/HTTP trace intake (protobuf or JSON, gzip), behind the ingest token
(server/intake/otlp.py maps spans to runs and lanes; the protocol validates; the span sinks store)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from ..access.declared import declare
from ..access.scope import principal_of
from ..intake.gate import IntakeGate
from ..intake.otlp import decode_request
from ..intake.pipeline import SpansReceived
from ..routing.body import gunzip_bounded, read_body
from ..routing.change_answers import OtlpAnswer
from ..routing.models import error_responses, inline_schema
from ..state import AppState

ROUTE_OTLP_TRACES = "/v1/traces"
ROUTE_OTLP_METRICS = "/v1/metrics"


MAX_IN_FLIGHT = 4  # OTLP/HTTP requests decoded at once (like the gRPC intake's worker threads)


def _otlp_body(what: str) -> dict[str, Any]:
    """The OpenAPI request body of an OTLP/HTTP export (`what`: ExportTraceServiceRequest, …)."""
    return {"requestBody": {"required": True, "content": {
        "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
        "application/json": {"schema": {"type": "object", "description": f"OTLP/JSON {what}"}}}}}


def build_router(st: AppState) -> APIRouter:
    r = APIRouter(tags=["otlp"])
    # a parsed request costs a few times its body: hold at most this many bodies' worth at once
    gate = IntakeGate(MAX_IN_FLIGHT, 4 * st.config.max_body_bytes, "OTLP trace intake busy")

    def admitted_size(request: Request) -> int:
        """What a request may cost the gate: its declared length, or the limit when unknown or gzip'd (a gzip'd
        body inflates up to the body limit)."""
        declared = request.headers.get("content-length", "")
        gzipped = (request.headers.get("content-encoding") or "").lower() == "gzip"
        limit = st.config.max_body_bytes
        return int(declared) if declared.isdigit() and int(declared) <= limit and not gzipped else limit

    def intake(raw: bytes, encoding: str | None, content_type: str, projects: frozenset[str] | None) -> SpansReceived:
        spans, b64 = decode_request(gunzip_bounded(raw, encoding, st.config.max_body_bytes), content_type)
        return st.intake.otlp(spans, b64, projects)

    answer_schema = inline_schema(OtlpAnswer)  # (its JSON form)
    otlp_200: dict[int | str, dict[str, Any]] = {200: {
                      "description": "ExportTraceServiceResponse, in the request's encoding",
                      "content": {"application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
                                  "application/json": {"schema": answer_schema}}}}

    @r.post(
        ROUTE_OTLP_TRACES, **declare(st.auth, "ingest", "partial"),
        responses={**otlp_200, **error_responses(400, 401, 403, 413, 415, 503)},
        openapi_extra=_otlp_body("ExportTraceServiceRequest"),
    )
    async def traces(request: Request) -> Response:
        """OTLP/HTTP ExportTraceServiceRequest (application/x-protobuf or application/json, optionally gzip).
        Answers an ExportTraceServiceResponse; spans refused by validation are counted in `partialSuccess`."""
        with gate.admit(admitted_size(request)):
            raw = await read_body(request, st.config.max_body_bytes)
            content_type = request.headers.get("content-type", "application/x-protobuf")
            got = await run_in_threadpool(intake, raw, request.headers.get("content-encoding"), content_type,
                                          principal_of(request).projects)  # an ingest token writes its projects only
            await st.acks.until_stored(got.receipt, st.config.ack_timeout_s)
        rejected, error = got.rejected, got.error
        if content_type.split(";", 1)[0].strip().lower() == "application/json":
            body = {"partialSuccess": {"rejectedSpans": str(rejected), "errorMessage": error}} if rejected else {}
            return JSONResponse(body)
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTracePartialSuccess,
            ExportTraceServiceResponse,
        )

        msg = ExportTraceServiceResponse()
        if rejected:
            msg.partial_success.CopyFrom(ExportTracePartialSuccess(rejected_spans=rejected, error_message=error[:1000]))
        return Response(msg.SerializeToString(), media_type="application/x-protobuf")

    def metrics_intake(raw: bytes, encoding: str | None, content_type: str,
                       projects: frozenset[str] | None) -> SpansReceived:
        msg = st.otlp_metrics.decode(gunzip_bounded(raw, encoding, st.config.max_body_bytes), content_type)
        batches, counts = st.otlp_metrics.to_batches(msg)
        return st.intake.otlp_metrics(batches, counts, projects)

    @r.post(
        ROUTE_OTLP_METRICS, **declare(st.auth, "ingest", "partial"),
        responses={200: {"description": "ExportMetricsServiceResponse, in the request's encoding",
                         "content": {"application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
                                     "application/json": {"schema": answer_schema}}},
                   **error_responses(400, 401, 403, 413, 415, 503)},
        openapi_extra=_otlp_body("ExportMetricsServiceRequest"),
    )
    async def metrics(request: Request) -> Response:
        """OTLP/HTTP ExportMetricsServiceRequest (protobuf or JSON, optionally gzip): gauges, sums and explicit-bucket
        histograms become series of their run (docs/otel.md); points refused are counted in `partialSuccess`."""
        with gate.admit(admitted_size(request)):
            raw = await read_body(request, st.config.max_body_bytes)
            content_type = request.headers.get("content-type", "application/x-protobuf")
            got = await run_in_threadpool(metrics_intake, raw, request.headers.get("content-encoding"), content_type,
                                          principal_of(request).projects)
            await st.acks.until_stored(got.receipt, st.config.ack_timeout_s)
        if content_type.split(";", 1)[0].strip().lower() == "application/json":
            body = {"partialSuccess": {"rejectedDataPoints": str(got.rejected), "errorMessage": got.error}} \
                if got.rejected else {}
            return JSONResponse(body)
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse

        msg = ExportMetricsServiceResponse()
        if got.rejected:
            msg.partial_success.rejected_data_points = got.rejected
            msg.partial_success.error_message = got.error[:1000]
        return Response(msg.SerializeToString(), media_type="application/x-protobuf")

    return r

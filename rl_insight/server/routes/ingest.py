"""POST /api/v1/ingest: a batch from a training client (protocol: rl_insight/protocol.py)."""

from __future__ import annotations

import time
from concurrent.futures import Future

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ...protocol import PROTOCOL_VERSIONS, ROUTE_INGEST
from ...redact import redact_flat
from ..intake.ingest import apply_batch, decode_body, until_stored
from .models import IngestAnswer, IngestBody, error_responses, inline_schema
from ..state import AppState
from .body import read_body


def build_router(st: AppState) -> APIRouter:
    r = APIRouter(tags=["ingest"], dependencies=[Depends(st.auth.require_write)])

    def ingest_sync(raw: bytes, encoding: str | None) -> tuple[dict, int, "Future[bool] | None"]:
        started = time.perf_counter()
        obj = decode_body(raw, encoding, st.config.max_body_bytes)
        batch, result = apply_batch(obj, st.store)
        since = st.writer.seq() if st.writer is not None else None
        run_info = False
        if st.writer is not None:
            st.writer.put_samples(result.samples)
            c = batch.client
            if c.run_config is not None and c.project and c.experiment_name:
                config, _ = redact_flat(c.run_config)  # again here: a client of another version may not have
                st.writer.put_run_info(c.project, c.experiment_name, config, c.run_tags or [])
                run_info = True
        st.exporters.samples(result.samples)
        st.spans.put(result.span_starts, result.spans, batch.client.host, batch.client.namespace)
        st.clients.seen(batch.client, result.span_starts, result.spans, batch.final)
        m = st.metrics
        for section, n in result.accepted_by_section.items():
            m.accepted.labels(section).inc(n)
        for reason, n in result.reasons.items():
            m.rejected.labels(reason).inc(n)
        if result.replaced_strings:
            m.replaced.inc(result.replaced_strings)
        m.latency.observe(time.perf_counter() - started)
        c = batch.client
        stepped = [r for r in result.samples if r.step is not None]
        if stepped:
            # the clock moves when the client logged the step (its timestamp, never in the server's future), not when the
            # batch arrived: spans timed by the same cluster's clocks are then put in the right step
            top = max(r.step for r in stepped)
            at = min(min(r.ts for r in stepped if r.step == top), time.time())
            st.profiles.note_step(c.project, c.experiment_name, top, at)
        body = {"accepted": result.accepted, "rejected": result.rejected, "errors": result.errors, "boot_id": st.boot_id,
                "replaced_strings": result.replaced_strings, "protocols": list(PROTOCOL_VERSIONS),
                # control rides on replies: the run's active profile requests and its step clock
                **st.profiles.for_client(c.project, c.experiment_name)}
        # answered once the run store committed it (see RunStoreWriter.durable): an acknowledged item is never lost
        durable = st.writer.durable(since) if since is not None and (result.samples or result.spans or result.span_starts
                                                                      or run_info or batch.final) else None
        if result.rejected and not result.accepted:
            body["detail"] = f"all {result.rejected} items of the batch were refused; see errors"
            return body, 422, durable
        return body, 200, durable

    @r.post(ROUTE_INGEST, response_model=IngestAnswer, responses=error_responses(400, 401, 403, 413, 415, 422, 503),
            openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                "schema": inline_schema(IngestBody)}}}})
    async def ingest(request: Request) -> JSONResponse:
        """Metric samples, span starts and finished spans of one client. Invalid items are refused one by one
        (listed in `errors`, counted by reason on /metrics); the rest of the batch is kept. 422 only when nothing
        was accepted."""
        raw = await read_body(request, st.config.max_body_bytes)
        # decoding and validation are CPU work: off the event loop, so /metrics and /healthz stay responsive
        body, status, durable = await run_in_threadpool(ingest_sync, raw, request.headers.get("content-encoding"))
        await until_stored(durable, st.config.ack_timeout_s)
        return JSONResponse(body, status_code=status)

    return r

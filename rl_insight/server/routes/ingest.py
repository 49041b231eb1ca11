"""POST /api/v1/ingest: a batch from a training client (protocol: rl_insight/protocol/batch.py; the answer:
protocol/reply.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response

from ...errors import PayloadTooLargeError
from ...protocol import PROTOCOL_VERSIONS, ROUTE_INGEST, IngestReply
from ..access.declared import Access, in_schema
from ..http.hot_route import Endpoint
from ..routing.body import decode_body, read_body
from ..routing.models import IngestAnswer, IngestBody, error_responses, inline_schema
from ..runstore.hand_over import Receipt
from ..state import AppState

INLINE_BYTES = 16 * 1024  # request bodies up to this size as sent (gzip) are handled on the event loop ...
INLINE_DECODED_BYTES = 256 * 1024  # ... when they stay this small once decompressed


def build_router(st: AppState) -> tuple[Endpoint, APIRouter]:
    """Ingest's endpoint, for the app's hot path (http/hot_route.py), and its one route, which documents it in
    /openapi.json and serves it wherever the hot path does not (another app, a test)."""
    r = APIRouter(tags=["ingest"])
    access = Access(st.auth, "ingest", "partial")  # each item's project is checked as the batch is decoded

    def ingest_sync(raw: bytes, encoding: str | None, body: Any = None,
                    projects: frozenset[str] | None = None) -> tuple[dict, int, Receipt | None]:
        done = st.intake.batch(decode_body(raw, encoding, st.config.max_body_bytes) if body is None else body,
                               projects)
        result, c = done.result, done.batch.client
        refused_all = bool(result.rejected and not result.accepted)
        control = st.control.for_client(c.project, c.experiment_name)
        reply = IngestReply(
            result.accepted,
            result.rejected,
            result.errors,
            st.boot_id,
            result.replaced_strings,
            PROTOCOL_VERSIONS,
            control,
            f"all {result.rejected} items of the batch were refused; see errors" if refused_all else None,
        )
        return reply.to_wire(), 422 if refused_all else 200, done.receipt

    async def ingest(request: Request) -> Response:
        """POST /api/v1/ingest (what it takes and answers: `documented` below, in /openapi.json)."""
        await access.enforce(request)  # (here, not a dependency: the hot path runs this endpoint without FastAPI)
        projects = request.state.principal.projects  # an ingest token writes its projects only (None: any)
        raw = await read_body(request, st.config.max_body_bytes)
        encoding = request.headers.get("content-encoding")
        small = None
        if len(raw) <= INLINE_BYTES:
            # a usual batch (a trainer rank's second: tens of samples, a few spans) is handled here: a trip through
            # the thread pool and back costs more than the work, and a thousand clients a second pay it. Only if it
            # stays small once gunzip'd (a small bomb would hold the loop): else it goes the big ones' way
            try:
                small = decode_body(raw, encoding, min(INLINE_DECODED_BYTES, st.config.max_body_bytes))
            except PayloadTooLargeError:
                if st.config.max_body_bytes <= INLINE_DECODED_BYTES:
                    raise
        if small is not None:
            body, status, receipt = ingest_sync(raw, encoding, small, projects)
        else:  # a big one is CPU work: off the event loop, so /metrics and /healthz stay responsive
            body, status, receipt = await run_in_threadpool(ingest_sync, raw, encoding, None, projects)
        del raw, small  # nothing of the request is held while its answer waits for the commit
        await st.acks.until_stored(receipt, st.config.ack_timeout_s)
        return JSONResponse(body, status_code=status)

    # The endpoint is served below FastAPI's request handling (dependency solving, the endpoint's parameters, response
    # models): app.py hands POST requests to it from its innermost middleware (http/hot_route.HotRoute: inside
    # GuardMiddleware and RequestCounter, its errors answered by app.py's handlers), with this route in the scope (the
    # request counter labels answers by it). At 1,000 clients a batch a second the layers skipped were about a third
    # of a batch's CPU (bench/RESULTS.md, issue 24). The route is the one registration: its schema in /openapi.json,
    # other methods 405.
    @r.post(ROUTE_INGEST, response_model=IngestAnswer, responses=error_responses(400, 401, 403, 413, 415, 422, 503),
            openapi_extra={**in_schema(access), "requestBody": {"required": True, "content": {"application/json": {
                "schema": inline_schema(IngestBody)}}}}, summary="Ingest")
    async def documented(request: Request) -> Response:
        """Metric samples, span starts and finished spans of one client. Invalid items are refused one by one
        (listed in `errors`, counted by reason on /metrics); the rest of the batch is kept. 422 only when nothing
        was accepted."""
        return await ingest(request)

    return ingest, r

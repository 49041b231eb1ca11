"""Live span views across runs (open states, recent spans), from the in-memory sink."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from typing_extensions import TypedDict

from ..access.declared import declare
from ..access.scope import visible_filter
from ..routing.models import error_responses, typed_answer
from ..state import AppState


class LiveSpan(TypedDict):
    """A span as the in-memory sink holds it (protocol/spans.SpanRecord.to_dict): `end_ns` null while it is open."""

    id: str
    trace_id: str  # its own id when the client sent none
    parent_id: str | None
    name: str
    lane: str | None  # null for a span that names no lane (an OTLP span without state_lane_id)
    kind: str
    start_ns: int
    end_ns: int | None
    attributes: dict[str, Any]


class OpenSpans(TypedDict):
    """One page of the open states, oldest first: `next_offset` asks for the next (null on the last page)."""

    spans: list[LiveSpan]
    count: int
    total: int
    offset: int
    next_offset: int | None


class RecentSpans(TypedDict):
    spans: list[LiveSpan]
    count: int


def build_router(st: AppState) -> APIRouter:
    r = APIRouter(prefix="/api/v1/spans", tags=["spans"],
                  responses=error_responses(401, 403))

    @r.get("/open", **declare(st.auth, "read", "listed"), **typed_answer(OpenSpans, "one page of the open states"))
    async def open_spans(
        request: Request, offset: int = Query(0, ge=0, le=10_000_000), limit: int = Query(1000, ge=1, le=10_000)
    ) -> dict[str, Any]:
        """RL states that have started and not ended (a stuck rollout shows up here), oldest first, one page (of the
        token's projects)."""
        items, total = st.memory_spans.open_page(offset, limit, visible_filter(request))
        nxt = offset + len(items)
        return {"spans": items, "count": len(items), "total": total, "offset": offset,
                "next_offset": nxt if nxt < total else None}

    @r.get("/recent", **declare(st.auth, "read", "listed"),
           **typed_answer(RecentSpans, "the latest spans, oldest first"))
    async def recent_spans(request: Request, limit: int = Query(1000, ge=1, le=10_000)) -> dict[str, Any]:
        """The most recent spans the server received (finished or started), across runs."""
        items = st.memory_spans.recent(limit, visible_filter(request))
        return {"spans": items, "count": len(items)}

    return r

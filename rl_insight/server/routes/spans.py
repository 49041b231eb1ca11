"""Live span views across runs (open states, recent spans), from the in-memory sink."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query

from ..state import AppState
from .models import error_responses


def build_router(st: AppState) -> APIRouter:
    r = APIRouter(prefix="/api/v1/spans", tags=["spans"], dependencies=[Depends(st.auth.require_read)],
                  responses=error_responses(401, 403))

    @r.get("/open")
    async def open_spans(
        offset: int = Query(0, ge=0, le=10_000_000), limit: int = Query(1000, ge=1, le=10_000)
    ) -> dict[str, Any]:
        """RL states that have started and not ended (a stuck rollout shows up here), oldest first, one page."""
        items, total = st.memory_spans.open_page(offset, limit)
        nxt = offset + len(items)
        return {"spans": items, "count": len(items), "total": total, "offset": offset,
                "next_offset": nxt if nxt < total else None}

    @r.get("/recent")
    async def recent_spans(limit: int = Query(1000, ge=1, le=10_000)) -> dict[str, Any]:
        items = st.memory_spans.recent(limit)
        return {"spans": items, "count": len(items)}

    return r

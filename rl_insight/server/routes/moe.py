"""MoE expert load over HTTP: `GET /api/v1/runs/{run_id}/moe[?step=]` (server/runstore/moe.py,
rl_insight/semantics/moe.py)."""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from ..access.declared import declare
from ..routing.models import error_responses, typed_answer
from ..routing.params import RunId
from ..runstore.results import Moe
from ..state import AppState


def build_router(st: AppState) -> APIRouter:
    assert st.reader is not None
    reader = st.reader
    r = APIRouter(prefix="/api/v1/runs", tags=["runs"],
                  responses=error_responses(401, 403, 404, 422))

    @r.get("/{run_id}/moe", **declare(st.auth, "read", "named"), **typed_answer(Moe, "expert load by layer and step"))
    async def run_moe(run_id: RunId, step: Optional[float] = Query(None, ge=-2**53, le=2**53, description="the step of "
                                                                   "the layers × experts view (default: the last)")
                      ) -> dict[str, Any]:
        """MoE expert load (verl's rollout/moe/*, semantics/moe.py): each layer's max violation of uniform load
        by step, the most imbalanced layer, and, when the job logs each expert's share, layers x experts with the
        hottest expert named."""
        return await run_in_threadpool(reader.moe, run_id, step)

    return r

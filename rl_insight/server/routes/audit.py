"""The audit log (server/access/audit.py), admin only:

    GET /api/v1/audit[?limit=N&since=UNIX&who=NAME]   the newest actions first: who, role, address, when, method,
                                                      path, status, what
"""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool
from typing_extensions import TypedDict

from ...errors import ConflictError
from ..access.audit import MAX_LISTED
from ..access.declared import declare
from ..routing.models import error_responses, typed_answer
from ..state import AppState


class AuditEntry(TypedDict):
    """One action: who (a token's name) with which role, from which address, when, the request and its status, and
    what its answer named (id, name, project, …)."""

    at: float
    who: str
    role: str
    address: str  # the client's address, as this server saw it (behind a proxy: the proxy's)
    method: str
    path: str
    status: int
    what: dict[str, Any]


def build_router(st: AppState) -> APIRouter:
    r = APIRouter(prefix="/api/v1/audit", tags=["access"],
                  responses=error_responses(401, 403, 409, 422))

    @r.get("", **declare(st.auth, "admin", "global"),
           **typed_answer(dict[str, list[AuditEntry]], "the newest actions first"))
    async def audit(limit: int = Query(200, ge=1, le=MAX_LISTED),
                    since: Optional[float] = Query(None, ge=0, le=1e11, description="unix time"),
                    who: Optional[str] = Query(None, max_length=200, description="one token's name")
                    ) -> dict[str, Any]:
        if st.audit is None:
            raise ConflictError("this server keeps no run store: the audit log lives there")
        entries = await run_in_threadpool(st.audit.entries, limit, since, who)
        return {"entries": entries}

    return r

"""Notifications over HTTP (outbound/alerting/): whether they are on, and the receivers they go to.

    GET    /api/v1/alerting                          on or off, the Alertmanager, how many receivers, in words
    GET    /api/v1/alerting/receivers                the receivers, without their secrets
    POST   /api/v1/alerting/receivers[?replace=true] add one (checked by Alertmanager, reloaded; refused whole)
    DELETE /api/v1/alerting/receivers/{name}         remove one
    POST   /api/v1/alerting/receivers/{name}/test    a test notification to that receiver alone

Changes need the token (or the UI's session); a webhook URL or SMTP password sent here is never answered back.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Path, Query
from starlette.concurrency import run_in_threadpool

from ..outbound.alerting.notifications import ChangeResult, NotificationStatus
from ..outbound.alerting.receivers import ShownReceiver
from ..state import AppState
from .models import error_responses, typed_answer

ReceiverName = Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", description="a receiver's name")


def build_router(st: AppState) -> APIRouter:
    n = st.notifications
    read = APIRouter(prefix="/api/v1/alerting", dependencies=[Depends(st.auth.require_read)], tags=["alerting"],
                     responses=error_responses(401))
    change = APIRouter(prefix="/api/v1/alerting", dependencies=[Depends(st.auth.require_operator)],
                       tags=["alerting"], responses=error_responses(401, 403, 404, 409, 422, 502, 503))

    @read.get("", **typed_answer(NotificationStatus, "whether notifications are delivered, and where"))
    async def status() -> dict[str, Any]:
        return dict(await run_in_threadpool(n.status))

    @read.get("/receivers", **typed_answer(dict[str, list[ShownReceiver]], "the receivers (no secrets)"))
    async def receivers() -> dict[str, Any]:
        return {"receivers": await run_in_threadpool(n.receivers)}

    @change.post("/receivers", status_code=201, **typed_answer(ChangeResult, "the receivers now"))
    async def add(receiver: dict[str, Any] = Body(..., description="name, kind (webhook, slack, email), project, "
                                                                    "and the kind's fields (docs/alerts.md)"),
                  replace: bool = Query(False, description="replace a receiver of the same name")) -> dict[str, Any]:
        return dict(await run_in_threadpool(n.add, receiver, replace))

    @change.delete("/receivers/{name}", **typed_answer(ChangeResult, "the receivers now"))
    async def remove(name: str = ReceiverName) -> dict[str, Any]:
        return dict(await run_in_threadpool(n.remove, name))

    @change.post("/receivers/{name}/test", **typed_answer(dict[str, str], "what was sent"))
    async def test(name: str = ReceiverName) -> dict[str, Any]:
        return {"message": await run_in_threadpool(n.test, name, st.public_url)}

    out = APIRouter()
    out.include_router(read)
    out.include_router(change)
    return out

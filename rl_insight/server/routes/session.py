"""Sign-in for the built-in UI: exchange the token for an HttpOnly, SameSite=Strict session cookie."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..._version import __version__
from ...errors import InvalidInputError, UnauthorizedError
from ..security import install_cookie
from ..state import AppState
from .body import decode_body, read_body
from .models import LoginBody, error_responses, inline_schema


def build_router(st: AppState) -> APIRouter:
    r = APIRouter(prefix="/api/v1", tags=["session"])

    @r.post("/login", responses=error_responses(400, 401, 403, 413, 415, 422),
            openapi_extra={"requestBody": {"content": {"application/json": {"schema": inline_schema(LoginBody)}}}})
    async def login(request: Request) -> JSONResponse:
        """Exchange the token for an HttpOnly session cookie (used by the built-in UI)."""
        raw = await read_body(request, 64 * 1024)
        body = decode_body(raw, request.headers.get("content-encoding"), 64 * 1024) if raw else {}
        if not isinstance(body, dict):
            raise InvalidInputError(f"login body must be an object {{\"token\": ...}}, found {type(body).__name__}")
        supplied = body.get("token")
        if st.auth.token and (not isinstance(supplied, str) or not st.auth.token_ok(supplied)):
            raise UnauthorizedError("wrong token", hint="use the server's token (`rl-insight server credentials` "
                                                        "shows it)")
        resp = JSONResponse({"status": "ok"})
        if st.auth.token:
            install_cookie(resp, st.auth.token)
        return resp

    @r.get("/session")
    async def session(request: Request) -> dict[str, Any]:
        return {"auth_required": bool(st.auth.token), "authenticated": st.auth.authenticated(request),
                "prometheus_url": st.prometheus.url, "grafana_url": st.config.grafana_url, "version": __version__}

    return r

"""Named tokens (server/access/tokens.py), admin only:

    POST   /api/v1/tokens          create one: {name, role, projects?, expires_s?} -> the secret, shown once
    GET    /api/v1/tokens          every token: name, role, projects, created, last used, expiry (never the secret)
    DELETE /api/v1/tokens/{name}   revoke it, on every server of the store within seconds

A server without a run store has no named tokens: these answer 409.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from typing_extensions import TypedDict

from ...errors import ConflictError
from ..access.declared import declare
from ..access.tokens import NAME, PROJECT
from ..routing.models import error_responses, typed_answer
from ..state import AppState

TokenName = Path(pattern=NAME.pattern, description="a token's name")
ProjectName = Annotated[str, Field(pattern=PROJECT.pattern, min_length=1, max_length=256)]


class TokenCreate(BaseModel):
    """A named token: its role, the projects it is for (none: all) and how long it lives (none: until revoked)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME.pattern, description="1 to 64 letters, digits, '_', '.', '@' or '-'")
    role: Literal["viewer", "operator", "ingest", "admin"]
    projects: Optional[list[ProjectName]] = Field(None, max_length=256,
                                                  description="the projects it may see or write (not for role "
                                                              "admin: an admin is of every project)")
    expires_s: Optional[float] = Field(None, ge=60, le=10 * 366 * 86400, description="seconds from now")


class TokenInfo(TypedDict):
    """A token as listed: never its secret."""

    name: str
    role: str
    projects: list[str] | None
    created: float
    created_by: str
    expires: float | None
    revoked: float | None


class CreatedToken(TypedDict):
    token: str  # the secret: shown this once
    info: TokenInfo


def build_router(st: AppState) -> APIRouter:
    r = APIRouter(prefix="/api/v1/tokens", tags=["access"],
                  responses=error_responses(401, 403, 404, 409, 422))

    def book() -> Any:
        if st.tokens is None:
            raise ConflictError("this server keeps no run store: named tokens live there",
                                hint="start it with its run store (the default) to create named tokens")
        return st.tokens

    @r.post("", **declare(st.auth, "admin", "global"),
            **typed_answer(CreatedToken, "the new token's secret (shown once) and record", status=201))
    async def create(body: TokenCreate, request: Request) -> dict[str, Any]:
        if not st.auth.token:
            raise ConflictError("this server has no token: every request to it is admin, so a named token would "
                                "limit nobody", hint="start the server with a token (`rl-insight server start "
                                "--token …`, or on a network address, which generates one) to hand out roles")
        who = request.state.principal.name
        secret, info = await run_in_threadpool(book().create, body.name, body.role, body.projects, body.expires_s,
                                               who)
        return {"token": secret, "info": info}

    @r.get("", **declare(st.auth, "admin", "global"),
           **typed_answer(dict[str, list[TokenInfo]], "every named token (no secrets)"))
    async def list_tokens() -> dict[str, Any]:
        return {"tokens": await run_in_threadpool(book().list)}

    @r.delete("/{name}", **declare(st.auth, "admin", "global"), **typed_answer(TokenInfo, "the revoked token"))
    async def revoke(request: Request, name: str = TokenName) -> dict[str, Any]:
        return dict(await run_in_threadpool(book().revoke, name, request.state.principal.name))

    return r

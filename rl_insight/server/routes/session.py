"""Sign-in for the built-in UI: exchange the token for an HttpOnly, SameSite=Strict session cookie.

Wrong tokens are limited per client address (`FailedAttempts`; behind a trusted proxy, per person or forwarded
client): past MAX_FAILURES in WINDOW_S the address gets 429 with `Retry-After` until its oldest failure leaves the
window, whatever it sends, so a token cannot be guessed at network speed. A right token signs in as before (and an
address's successes are not counted)."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from typing_extensions import TypedDict

from ..._version import __version__
from ...errors import InvalidInputError, RateLimitedError, UnauthorizedError
from ..access.declared import declare
from ..rooms.stacks import verdict_classes
from ..routing.body import decode_body, read_body
from ..routing.change_answers import SignedIn
from ..routing.models import LoginBody, inline_schema, typed_answer
from ..security import install_cookie
from ..state import AppState

MAX_FAILURES = 10  # wrong tokens an address may send in WINDOW_S
WINDOW_S = 60.0
MAX_ADDRESSES = 10_000  # addresses remembered (the oldest forgotten first)


class FailedAttempts:
    """Wrong sign-ins per client address in a sliding window, bounded in addresses."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self._by_address: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def check(self, address: str) -> None:
        """RateLimitedError while `address` has MAX_FAILURES failures within WINDOW_S."""
        with self._lock:
            times = self._by_address.get(address)
            now = self.clock()
            while times and now - times[0] > WINDOW_S:
                times.popleft()
            if times is not None and len(times) >= MAX_FAILURES:
                wait = max(1, int(WINDOW_S - (now - times[0])) + 1)
                raise RateLimitedError(f"too many wrong tokens from {address[:64]}; try again in {wait} s",
                                       hint="use the server's token (`rl-insight server credentials` shows it)",
                                       retry_after_s=wait)

    def failed(self, address: str) -> None:
        with self._lock:
            times = self._by_address.pop(address, None) or deque(maxlen=MAX_FAILURES)
            times.append(self.clock())
            self._by_address[address] = times  # (re-inserted: the dict's order is the oldest first)
            if len(self._by_address) > MAX_ADDRESSES:
                del self._by_address[next(iter(self._by_address))]


class SessionAnswer(TypedDict):
    """Whether a token is needed and this browser has it, who it is and what its role allows, where Prometheus and
    Grafana are, the version."""

    auth_required: bool
    authenticated: bool
    who: str | None  # the signed-in token's name (None: not signed in)
    role: str | None  # its role: viewer, operator, ingest or admin (server/access/principal.py)
    projects: list[str] | None  # the projects it may see (None: all)
    prometheus_url: str | None
    grafana_url: str | None
    version: str
    verdict_classes: dict[str, dict[str, Any]]  # the hang verdict's classes (server/rooms/stacks/verdict_classes.py)


def build_router(st: AppState) -> APIRouter:
    r = APIRouter(prefix="/api/v1", tags=["session"])
    attempts = FailedAttempts()

    @r.post("/login", **declare(st.auth, "open", "open"),
            **typed_answer(SignedIn, "signed in: the session cookie is set",
                           errors=(400, 401, 403, 413, 415, 422, 429)),
            openapi_extra={"requestBody": {"content": {"application/json": {"schema": inline_schema(LoginBody)}}}})
    async def login(request: Request) -> JSONResponse:
        """Exchange the token for an HttpOnly session cookie (used by the built-in UI)."""
        # behind a trusted proxy every person has its address: count each person (or forwarded client) apart
        address = st.auth.proxy.limiter_key(request) if st.auth.proxy is not None else \
            (request.client.host if request.client else "?")
        if st.auth.token:
            attempts.check(address)
        raw = await read_body(request, 64 * 1024)
        body = decode_body(raw, request.headers.get("content-encoding"), 64 * 1024) if raw else {}
        if not isinstance(body, dict):
            raise InvalidInputError(f"login body must be an object {{\"token\": ...}}, found {type(body).__name__}")
        supplied = body.get("token")
        who = st.auth.resolve(supplied) if st.auth.token and isinstance(supplied, str) else None
        if st.auth.token and (who is None or not who.can_read):
            attempts.failed(address)
            raise UnauthorizedError("wrong token" if who is None else f"token {who.name!r} ({who.role}) cannot sign in "
                                    "to the UI", hint="use the server's token (`rl-insight server credentials` shows "
                                                      "it) or a viewer, operator or admin token")
        resp = JSONResponse({"status": "ok"})
        if st.auth.token and isinstance(supplied, str):
            install_cookie(resp, supplied.strip())
        return resp

    @r.get("/session", **declare(st.auth, "open", "open"),
           **typed_answer(SessionAnswer, "what the UI needs to know of this server"))
    async def session(request: Request) -> SessionAnswer:
        who = st.auth.principal(request)
        return {"auth_required": bool(st.auth.token), "authenticated": who is not None,
                "who": who.name if who is not None else None, "role": who.role if who is not None else None,
                "projects": sorted(who.projects) if who is not None and who.projects is not None else None,
                "prometheus_url": st.prometheus.url, "grafana_url": st.config.grafana_url, "version": __version__,
                "verdict_classes": verdict_classes.as_json()}

    return r

"""HotRoute (server/http/hot_route.py): one (method, path) served from the app's middleware straight to its endpoint;
its errors answered by the app's exception handlers, nearest class first, never by the catch-all; everything else
on to the router. A real Starlette app around it, over httpx's ASGI transport."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from rl_insight.server.http.hot_route import HotRoute


class Refused(ValueError):
    pass


class RefusedLoudly(Refused):
    pass


def build(endpoint: Any) -> tuple[Starlette, list[str]]:
    """An app whose router records what reached it; the hot endpoint is `endpoint` at POST /hot."""
    reached: list[str] = []

    async def routed(request: Request) -> Response:
        reached.append(f"{request.method} {request.url.path}")
        return PlainTextResponse("router")

    hot_route = Route("/hot", routed, methods=["POST"])

    async def on_refused(request: Request, exc: Exception) -> Response:
        return JSONResponse({"detail": f"refused: {exc}"}, status_code=422)

    async def on_loud(request: Request, exc: Exception) -> Response:
        return JSONResponse({"detail": f"loudly: {exc}"}, status_code=409)

    async def on_anything(request: Request, exc: Exception) -> Response:
        return JSONResponse({"detail": "internal"}, status_code=500)

    handlers: dict[Any, Any] = {Refused: on_refused, RefusedLoudly: on_loud, Exception: on_anything}
    app = Starlette(routes=[hot_route, Route("/other", routed, methods=["GET", "POST"])],
                    exception_handlers=handlers)
    app.user_middleware.append(Middleware(HotRoute, method="POST", path="/hot", endpoint=endpoint,
                                          route=hot_route, handlers=app.exception_handlers))
    return app, reached


def call(app: Starlette, method: str, path: str, body: bytes = b"", reraised: bool = False) -> httpx.Response:
    """The answer; with `reraised`, what the app raised to its server after answering is raised here."""
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=reraised)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.request(method, path, content=body)

    return asyncio.run(go())


def test_the_hot_request_reaches_its_endpoint_with_its_body_and_route_not_the_router() -> None:
    seen: list[Any] = []

    async def endpoint(request: Request) -> Response:
        seen.append((await request.body(), request.scope["route"].path))
        return JSONResponse({"ok": True}, status_code=201)

    app, reached = build(endpoint)
    answer = call(app, "POST", "/hot", b"payload")
    assert answer.status_code == 201 and answer.json() == {"ok": True}
    assert seen == [(b"payload", "/hot")] and reached == []


def test_other_methods_and_paths_go_on_to_the_router() -> None:
    async def endpoint(request: Request) -> Response:
        raise AssertionError("not the hot request")

    app, reached = build(endpoint)
    assert call(app, "GET", "/hot").status_code == 405  # the router's answer for a POST-only route
    assert call(app, "POST", "/other").text == "router"
    assert call(app, "POST", "/hot/more").status_code == 404
    assert reached == ["POST /other"]


@pytest.mark.parametrize("exc, status, detail", [(Refused("no"), 422, "refused: no"),
                                                 (RefusedLoudly("no"), 409, "loudly: no")])
def test_an_error_is_answered_by_the_nearest_handler_of_its_class(exc: Exception, status: int, detail: str) -> None:
    async def endpoint(request: Request) -> Response:
        raise exc

    app, _ = build(endpoint)
    answer = call(app, "POST", "/hot")
    assert (answer.status_code, answer.json()["detail"]) == (status, detail)
    assert exc.__traceback__ is None  # a reused instance keeps no frames of this request


def test_an_error_without_a_handler_of_its_own_goes_to_the_catch_all_outside() -> None:
    """Starlette's ServerErrorMiddleware answers it with the Exception handler and raises it on to the server (which
    logs it): had the hot route answered it, nothing would be raised."""
    async def endpoint(request: Request) -> Response:
        raise RuntimeError("boom")

    app, _ = build(endpoint)
    with pytest.raises(RuntimeError, match="boom"):
        call(app, "POST", "/hot", reraised=True)
    answer = call(app, "POST", "/hot")
    assert answer.status_code == 500 and answer.json() == {"detail": "internal"}

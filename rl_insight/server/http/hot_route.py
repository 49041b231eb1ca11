"""One hot route served from the app's own middleware, past the framework's per-request layers.

Why: at a thousand training clients posting a batch a second, each ingest request went through Starlette's
exception middleware, FastAPI's exit-stack middleware, the router and the endpoint's wrapper (two exception
wrappers and a Request built twice) before its handler ran: about a tenth of a batch's CPU in the server, for a
route that needs none of it (bench/RESULTS.md, issue 24).

`HotRoute` sits innermost among the app's middleware (inside the guard and the request counter, so a hot request
is checked, counted and given the security headers like any other) and hands one (method, path) straight to its
endpoint. Its errors are answered by the app's own exception handlers (`app.exception_handlers`, app.py's one
mapping), looked up as Starlette does: by the exception's class, nearest first, never the catch-all
`Exception`/500 handler, which stays the outer ServerErrorMiddleware's (an unexpected error propagates there, is
logged and answered 500 as on any route). Other methods on the path, and every other path, go on to the router.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping

from starlette.requests import Request
from starlette.responses import Response

Endpoint = Callable[[Request], Awaitable[Response]]


class HotRoute:
    def __init__(self, app: Any, *, method: str, path: str, endpoint: Endpoint, route: Any,
                 handlers: Mapping[Any, Callable[..., Any]]) -> None:
        """`route`: what the router would have matched (put in the scope: the request counter labels by its
        path); `handlers`: the app's exception handlers, read at each error (handlers added later count)."""
        self.app, self.method, self.path = app, method, path
        self.endpoint, self.route, self.handlers = endpoint, route, handlers

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != self.path or scope["method"] != self.method:
            await self.app(scope, receive, send)
            return
        scope["route"] = self.route
        request = Request(scope, receive, send)
        try:
            response = await self.endpoint(request)
        except Exception as exc:
            handler = self._handler_of(exc)
            if handler is None:
                raise
            response = await handler(request, exc)
            exc.__traceback__ = None  # (as Starlette does: a reused exception instance keeps no old frames)
        await response(scope, receive, send)

    def _handler_of(self, exc: Exception) -> Callable[..., Awaitable[Response]] | None:
        for cls in type(exc).__mro__:
            if cls is Exception:
                return None  # the catch-all is the server-error middleware's, outside
            handler = self.handlers.get(cls)
            if handler is not None:
                return handler
        return None

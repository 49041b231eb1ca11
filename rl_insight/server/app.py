"""FastAPI app factory: builds the AppState once and wires routers, middleware and error mapping.

Errors become HTTP answers in one place (`_install_error_handlers`), always as `ErrorBody`
(`{"detail", "hint"?, "errors"?}`), which is what `/openapi.json` documents for every 4xx.
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from prometheus_client import disable_created_metrics
from starlette.exceptions import HTTPException as StarletteHTTPException

from .._version import __version__
from ..errors import RLInsightError, UnauthorizedError
from ..protocol import ROUTE_INGEST, clean_text
from .access.declared import publish
from .config import ServerConfig
from .http.audit_trail import AuditTrail
from .http.hot_route import HotRoute
from .rooms.house import discover, furnish, routers
from .routes import audit, experiments, health, ingest, moe, otlp, panels, runs, session, spans, targets, tokens
from .routing.joined import mount
from .routing.models import ErrorBody, answer_schemas
from .security import SECURITY_HEADERS, GuardMiddleware
from .state import AppState
from .ui import STATIC, mount_ui

log = logging.getLogger("rl_insight.server")


def create_app(config: ServerConfig) -> FastAPI:
    disable_created_metrics()  # `_created` series double the exposition and no dashboard uses them
    st = AppState(config)
    rooms = discover()  # (server/rooms/: each feature's folder, found, not listed here)
    furnish(st, rooms)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        st.start()
        yield
        st.stop()

    app = FastAPI(
        title="RL-Insight server",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        description="Ingest, discovery and run-store API of rl-insight. When a token is configured, state-changing "
        "routes need it as a bearer token, and so do reads of runs, spans and targets (the UI uses a "
        "session cookie). State-changing routes take application/json only and refuse foreign origins.",
        **_framework_telemetry_off(),
    )
    app.state.st = st
    _install_error_handlers(app)
    ingest_endpoint, documented = ingest.build_router(st)
    ingest_route = next(r for r in documented.routes if getattr(r, "path", None) == ROUTE_INGEST)
    # ingest, innermost of the app's middleware and past the framework's per-request layers (http/hot_route.py); its
    # errors answered by the handlers above
    app.add_middleware(HotRoute, method="POST", path=ROUTE_INGEST, endpoint=ingest_endpoint, route=ingest_route,
                       handlers=app.exception_handlers)
    _install_metrics_middleware(app, st)
    app.add_middleware(AuditTrail, audit=st.audit)  # (inside the guard: a refused request is no action)
    # (added last: outermost, so that every answer, a refusal included, carries the security headers)
    app.add_middleware(GuardMiddleware, auth=st.auth, names=st.host_names,
                       wildcard_bind=config.host in ("0.0.0.0", "::", ""))

    mount(app, health.build_router(st))
    mount(app, documented)
    mount(app, otlp.build_router(st))
    mount(app, targets.build_router(st))
    mount(app, experiments.build_router(st))
    mount(app, spans.build_router(st))
    mount(app, session.build_router(st))
    mount(app, tokens.build_router(st))
    mount(app, audit.build_router(st))
    for router in routers(st, rooms):  # (before the runs' routes: a room's /runs/diff is not a run id)
        mount(app, router)
    if st.reader is not None:
        mount(app, runs.build_router(st))
        mount(app, moe.build_router(st))
        mount(app, panels.build_router(st))
    mount_ui(app, st.auth.require_read)

    @app.get("/docs", include_in_schema=False)
    async def docs() -> FileResponse:
        """Swagger UI from the vendored copy in the wheel (no CDN, no inline script)."""
        return FileResponse(STATIC / "docs.html", headers={"Cache-Control": "no-cache"})

    publish(app.routes)  # every documented route's access declaration into /openapi.json; none may lack one
    _document_errors(app)
    return app


def _framework_telemetry_off() -> dict[str, Any]:
    """FastAPI (0.165 and later) traces, counts and logs each request through OpenTelemetry's global providers as
    soon as one is set, and checks for them on every request. The server counts its own answers on /metrics
    (RequestCounter); a span per ingest answer among a user's traces is noise, and at a thousand clients the check
    alone was ~2 % of the loop's time. Older FastAPI has no such option."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}}


def _error(status: int, detail: str, hint: str | None = None, errors: list | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"detail": clean_text(detail)}
    if hint:
        body["hint"] = clean_text(hint)
    if errors is not None:
        body["errors"] = errors
    return JSONResponse(body, status_code=status, headers={**SECURITY_HEADERS, **(headers or {})})


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RLInsightError)
    async def _rl_error(request: Request, exc: RLInsightError) -> JSONResponse:
        retry_after = getattr(exc, "retry_after_s", None)  # (BusyError, StoreUnavailableError: ask again later)
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, UnauthorizedError) else \
            {"Retry-After": str(retry_after)} if retry_after is not None else None
        return _error(exc.http_status, exc.message, exc.hint, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        expected = _parameter_descriptions(request)
        for e in exc.errors()[:20]:
            loc = e.get("loc", ())
            where = ".".join(str(x) for x in loc)
            msg = str(e.get("msg", ""))
            if e.get("type") == "string_pattern_mismatch" and loc and expected.get(str(loc[-1])):
                msg = f"expected {expected[str(loc[-1])]}"  # the pattern itself says little to a person
            problems.append({"loc": clean_text(where), "msg": clean_text(msg)})
        first = problems[0] if problems else {"loc": "request", "msg": "invalid"}
        return _error(
            422, f"invalid {first['loc']}: {first['msg']}", "see /openapi.json for the expected parameters", problems
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else "request refused"
        return _error(exc.status_code, detail, headers=dict(exc.headers or {}))

    @app.exception_handler(OverflowError)
    async def _overflow(request: Request, exc: OverflowError) -> JSONResponse:
        return _error(422, f"a number in the request is out of range ({exc})", "numbers must fit a signed 64-bit "
                                                                               "integer")

    @app.exception_handler(RecursionError)
    async def _recursion(request: Request, exc: RecursionError) -> JSONResponse:
        return _error(400, "request is nested too deeply")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        backend = request.app.state.st.backend
        if backend is not None and backend.is_storage_failure(exc):  # the store went away mid-request (PostgreSQL
            # restarting): not a bug
            log.warning("run store unavailable on %s %s: %s", request.method, request.url.path, exc)
            return _error(503, f"the run store is unavailable now ({type(exc).__name__}); nothing stored was lost",
                          "ask again in a few seconds", headers={"Retry-After": "2"})
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return _error(500, f"internal error ({type(exc).__name__}); it was logged", "please report it with the "
                                                                                    "server log")


def _parameter_descriptions(request: Request) -> dict[str, str]:
    """The route's query and path parameters' descriptions, by name (what a validation message can quote)."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    out: dict[str, str] = {}
    for field in [*getattr(dependant, "query_params", []), *getattr(dependant, "path_params", [])]:
        description = getattr(field.field_info, "description", None)
        if description:
            out[field.alias] = description
    return out


class RequestCounter:
    """Pure ASGI: counts every answer by route template, method and status (`rl_insight_server_requests_total`).
    No task group and streams per request as `@app.middleware("http")` would add (see security.GuardMiddleware)."""

    def __init__(self, app: Any, st: AppState) -> None:
        self.app, self.requests = app, st.metrics.requests

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = [500]  # what an exception escaping the app becomes

        async def send_status(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:  # the router put the matched route into the (shared) scope
            route = scope.get("route")
            self.requests.labels(getattr(route, "path", "unmatched"), scope["method"], str(status[0])).inc()


def _install_metrics_middleware(app: FastAPI, st: AppState) -> None:
    app.add_middleware(RequestCounter, st=st)


def _schema_refs(node: Any) -> set[str]:
    """The component names `node` refers to (`{"$ref": "#/components/schemas/NAME"}`), at any depth."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        found = {ref.rsplit("/", 1)[-1]} if isinstance(ref, str) and ref.startswith("#/components/schemas/") else set()
        return found.union(*(_schema_refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_schema_refs(v) for v in node))
    return set()


@functools.lru_cache(maxsize=1)
def _error_body_schema() -> dict[str, Any]:
    """ErrorBody's schema as FastAPI writes a response model's (its own generator, once a process)."""
    probe = FastAPI(**_framework_telemetry_off())
    probe.get("/", responses={400: {"model": ErrorBody}})(lambda: None)
    return copy.deepcopy(probe.openapi()["components"]["schemas"]["ErrorBody"])


def _document_errors(app: FastAPI) -> None:
    """Make /openapi.json describe the error body we really send (ErrorBody, also for 422)."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = original()
        error_body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
        for path in schema.get("paths", {}).values():
            for op in path.values():
                for code, resp in op.get("responses", {}).items():
                    if code[:1] in ("4", "5"):  # always JSON, whatever the route's own media type
                        resp["content"] = dict(error_body)
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        comps.pop("HTTPValidationError", None)
        comps.pop("ValidationError", None)
        comps["ErrorBody"] = _error_body_schema()
        for name, answer in answer_schemas(_schema_refs(schema.get("paths", {})) - set(comps)).items():
            comps.setdefault(name, answer)
        schema["components"]["schemas"] = dict(sorted(comps.items()))  # (FastAPI's order: by name)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to customise the schema

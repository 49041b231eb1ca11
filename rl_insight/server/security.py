"""Who may do what: token checks (router-level dependencies), cross-site and DNS-rebinding defences,
and the security headers of every answer.

One rule for authentication: when a token is configured, every state-changing route and every read
of run data, spans or targets needs a token (bearer header, or the UI's session cookie for reads and for
the actions a person takes in the UI: requesting and cancelling a profile);
`/metrics`, `/healthz` and service discovery stay open so that Prometheus and probes work. A token is the server's
own (`--token`: admin) or a named token from the run store (server/access/tokens.py) with its role: ingest routes
need *ingest* or *admin*, reads *viewer* and up, a person's actions *operator* and up, token management *admin*
(server/access/principal.py). The request's principal is kept in `request.state.principal`.

Without a token the server relies on being reachable only from trusted places (loopback by
default), so it refuses what a web page in the user's browser could send it: state-changing
requests with a body a browser can send cross-site without a preflight (`text/plain`, forms), any
state-changing request from a foreign `Origin`, and — against DNS rebinding — any request whose
`Host` is not a name of this server.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import MutableHeaders

from ..errors import ForbiddenError, InvalidInputError, NotFoundError, UnauthorizedError
from .access.principal import ADMIN, ANONYMOUS, Principal
from .access.run_ids import parse_run_id, parse_run_id_list

SESSION_COOKIE = "rl_insight_session"
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Media types a browser cannot send cross-site without a CORS preflight (which we never answer).
BODY_TYPES = frozenset({"application/json", "application/x-protobuf", "application/protobuf",
                        "application/octet-stream"})  # octet-stream: profile trace chunks (not CORS-safelisted either)
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "localhost.localdomain", "ip6-localhost"})

# The UI loads nothing from elsewhere; uPlot sets inline styles, hence 'unsafe-inline' for styles only.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors "
    "'none'"
)
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": CSP,
    "Cross-Origin-Opener-Policy": "same-origin",
}


class Auth:
    """The token rule as FastAPI dependencies: `require_write` (ingest), `require_read`, `require_operator`,
    `require_admin`. `book`: the named tokens (server/access/tokens.py), None when the server keeps no run store."""

    def __init__(self, token: str, book: Any = None, proxy: Any = None) -> None:
        self.token = token
        self.book = book
        self.proxy = proxy  # server/access/sso.ProxySignOn: people a trusted proxy names (None: no single sign-on)
        self.run_project: Any = None  # run id -> its project, or None for no such run (AppState sets it)

    def token_ok(self, supplied: str) -> bool:
        """The server's own token (`--token`)."""
        return bool(self.token) and hmac.compare_digest(
            supplied.strip().encode("utf-8", "replace"), self.token.encode()
        )

    def resolve(self, supplied: str) -> Principal | None:
        """The principal of a token: the server's own (admin), a live named one, else None."""
        if self.token_ok(supplied):
            return ADMIN
        return self.book.resolve(supplied.strip()) if self.book is not None and supplied else None

    def _bearer(self, request: Request) -> Principal | None:
        scheme, _, supplied = request.headers.get("authorization", "").partition(" ")
        return self.resolve(supplied) if scheme.lower() == "bearer" else None

    def principal(self, request: Request, cookie: bool = True) -> Principal | None:
        """Who sends this request (bearer header, else — when `cookie` — the UI's session cookie or the person a
        trusted proxy names: what a browser carries); ANONYMOUS when the server has no token; None when unknown."""
        if not self.token:
            return ANONYMOUS
        found = self._bearer(request)
        if found is None and cookie:
            found = self.resolve(request.cookies.get(SESSION_COOKIE, ""))
            if found is None and self.proxy is not None:
                found = self.proxy.principal(request)
        return found

    def authenticated(self, request: Request) -> bool:
        return self.principal(request) is not None

    def _require(self, request: Request, cookie: bool, what: str, hint: str) -> Principal:
        action = request.method in STATE_CHANGING and (
            what not in ("send data", "deliver notifications") or request.url.path in AUDITED_DATA_ROUTES)
        if action:
            request.state.action = True  # refused, it is logged as a refused attempt (http/audit_trail.py)
        who = self.principal(request, cookie)
        if who is None:
            raise UnauthorizedError("missing or wrong bearer token" + (" or UI session" if cookie else ""), hint=hint)
        request.state.refused_who = who
        if not self._allows(who, what):
            raise ForbiddenError(f"token {who.name!r} ({who.role}) may not {what}",
                                 hint="ask an admin for a token with that role (`rl-insight server tokens create`)")
        if who.projects is not None:
            self._only_its_runs(request, who)
        request.state.principal = who
        if action:
            request.state.audit = True  # an action, for the audit log (http/audit_trail.py) once it succeeded
        return who

    def _only_its_runs(self, request: Request, who: Principal) -> None:
        """A token scoped to projects names only their runs: a run id of another project (in the path, a `run_id`
        query, or the `a`, `b`, `runs` of a diff or a comparison) is answered 404, as a run that does not exist: names
        do not leak. Each id is read with `parse_run_id`, the one reader the routes' parameters use too, so the id
        checked here is the id the route reads; any other spelling (`+2`, `2.0`, `2_0`, ` 2`) is a 422 here and
        there."""
        if self.run_project is None:
            return
        for name, text in _named_run_ids(request):
            ids = parse_run_id_list(text) if name == "runs" else [parse_run_id(text)]
            if ids is None or None in ids:
                raise InvalidInputError(f"{name} {text[:40]!r} is not a run id",
                                        hint="a run id is a plain decimal number, e.g. 12 (GET /api/v1/runs)")
            for run_id in ids:
                assert run_id is not None
                project = self.run_project(run_id)
                if project is not None and not who.sees(project):
                    raise NotFoundError(f"no run with id {run_id}", hint="GET /api/v1/runs lists the runs")

    @staticmethod
    def _allows(who: Principal, what: str) -> bool:
        return {"send data": who.can_ingest, "read run data": who.can_read, "do this": who.can_operate,
                "manage tokens": who.is_admin, "deliver notifications": who.is_admin}[what]

    # The routes' dependencies are coroutines though they never wait: FastAPI runs a plain function dependency in
    # its thread pool, a trip there and back (two wake-ups of the event loop) for a header comparison, on every
    # request; at a thousand clients that was 6 % of the server's CPU (bench/RESULTS.md, issue 24).
    async def require_write(self, request: Request) -> None:
        """Data a job sends (ingest, OTLP, uploads, target registration): *ingest* or *admin*, bearer only."""
        self._require(request, False, "send data",
                      "set RL_INSIGHT_TOKEN (training) or --token (CLI) to the server's token or an ingest token")

    async def require_operator(self, request: Request) -> None:
        """Actions a person takes in the UI (request or cancel a profile): bearer token or the UI's session cookie.
        The cookie is SameSite=Strict and every state-changing request passes the cross-site guard below, so a
        foreign page cannot use it. *operator* or *admin*."""
        self._require(request, True, "do this", "sign in on the UI, or send 'Authorization: Bearer <token>'")

    async def require_read(self, request: Request) -> None:
        """Run data, spans, targets and the UI's API calls: bearer token or the UI's session cookie; *viewer* and
        up."""
        self._require(request, True, "read run data",
                      "sign in on the UI, or send 'Authorization: Bearer <token>' (`rl-insight server credentials` "
                      "shows it)")

    async def require_server(self, request: Request) -> None:
        """What the managed Alertmanager hands the server (webhook messages to post on): the server's own token (or
        an admin's), bearer only; not an action for the audit log."""
        self._require(request, False, "deliver notifications", "Alertmanager sends the server's token from "
                                                               "<data_dir>/alerting/relay_token")

    async def require_admin(self, request: Request) -> None:
        """Token management: *admin* (the server's own token or a named admin token)."""
        self._require(request, True, "manage tokens", "use the server's token (`rl-insight server "
                                                            "credentials`) or an admin token")


# sent with a job's (ingest) token, but an action a person takes: in the audit log
AUDITED_DATA_ROUTES = frozenset({"/api/v1/experiments/archive", "/api/v1/experiments/restore", "/api/v1/targets"})
RUN_ID_PARAMS = ("run_id", "a", "b", "runs")  # the names a run id (`runs`: a list of them) is given under


def _named_run_ids(request: Request) -> list[tuple[str, str]]:
    """(name, text) of every run id the request names in its path or query."""
    found = [(n, str(request.path_params[n])) for n in RUN_ID_PARAMS if n in request.path_params]
    return found + [(n, v) for n in RUN_ID_PARAMS for v in request.query_params.getlist(n)]


def local_names(bound_host: str, extra: tuple[str, ...] | list[str] = ()) -> frozenset[str]:
    """Host names under which this server may legitimately be addressed."""
    names = set(LOOPBACK_NAMES) | {h.lower().strip("[]") for h in extra}
    if bound_host and bound_host not in ("0.0.0.0", "::", ""):
        names.add(bound_host.lower().strip("[]"))
    try:
        hn = socket.gethostname()
        names |= {hn.lower(), socket.getfqdn().lower()}
        names |= {str(ai[4][0]) for ai in socket.getaddrinfo(hn, None)}
    except OSError:
        pass
    return frozenset(names)


def _host_of(host_header: str) -> str:
    h = host_header.strip().lower()
    if h.startswith("["):
        return h[1:h.find("]")] if "]" in h else h
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def host_allowed(host_header: str | None, names: frozenset[str], wildcard_bind: bool) -> bool:
    """DNS rebinding sends a foreign *name* that resolves to us; IP literals cannot be rebound, and a
    server bound to every interface is addressed by any of its IPs."""
    if not host_header:
        return False
    host = _host_of(host_header)
    return host in names or (wildcard_bind and _is_ip_literal(host))


def _refuse(status: int, detail: str, hint: str) -> JSONResponse:
    return JSONResponse({"detail": detail, "hint": hint}, status_code=status, headers=SECURITY_HEADERS)


class GuardMiddleware:
    """Pure ASGI middleware applying the cross-site rules above and adding the security headers to every answer.

    Pure ASGI, not Starlette's `@app.middleware("http")`: that wraps each request in a task group and memory
    streams, which at a thousand clients' batches a second cost more than the request itself (bench/bench_fanin.py).
    It reads headers only, never the body."""

    def __init__(self, app: Any, auth: Auth, names: frozenset[str], wildcard_bind: bool) -> None:
        self.app, self.auth, self.names, self.wildcard_bind = app, auth, names, wildcard_bind

    def _problem(self, request: Request) -> Response | None:
        if not self.auth.token and not host_allowed(request.headers.get("host"), self.names, self.wildcard_bind):
            return _refuse(403, f"Host {request.headers.get('host', '')[:100]!r} is not a name of this server",
                           "address the server by its own host name or IP, or add the name with --allowed-host")
        if request.method in STATE_CHANGING:
            return _cross_site_problem(request)
        if request.method == "OPTIONS":  # no CORS: never answer a preflight
            return _refuse(405, "CORS preflight requests are not answered", "call the API from the same origin or a "
                                                                            "non-browser client")
        return None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problem = self._problem(Request(scope))
        if problem is not None:
            await problem(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for k, v in SECURITY_HEADERS.items():
                    if k not in headers:
                        headers[k] = v
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _cross_site_problem(request: Request) -> Response | None:
    origin = request.headers.get("origin")
    if origin is not None and origin != "null":
        own = f"{request.url.scheme}://{request.headers.get('host', '')}".lower()
        if origin.lower().rstrip("/") != own:
            return _refuse(403, f"cross-origin request from {origin[:100]!r} refused",
                           "state-changing calls are accepted from this server's own pages or from non-browser clients")
    elif origin == "null":
        return _refuse(403, "request from an opaque origin ('null') refused", "call the API from a non-browser client")
    if request.headers.get("sec-fetch-site") == "cross-site":
        return _refuse(403, "cross-site request refused", "call the API from the same origin or a non-browser client")
    has_body = request.headers.get("content-length", "0") not in ("0", "") or "transfer-encoding" in request.headers
    if has_body:
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media not in BODY_TYPES:
            return _refuse(
                415,
                f"Content-Type {media or '(none)'!r} is not accepted here",
                "send the body as application/json (browsers cannot send that cross-site without a preflight)",
            )
    return None


def install_cookie(response: Response, token: str) -> None:
    response.set_cookie(SESSION_COOKIE, token, httponly=True, samesite="strict", max_age=30 * 86400)


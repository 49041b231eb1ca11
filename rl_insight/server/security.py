"""Who may do what: token checks (router-level dependencies), cross-site and DNS-rebinding defences,
and the security headers of every answer.

One rule for authentication: when a token is configured, every state-changing route and every read
of run data, spans or targets needs it (bearer header, or the UI's session cookie for reads and for
the actions a person takes in the UI: requesting and cancelling a profile);
`/metrics`, `/healthz` and service discovery stay open so that Prometheus and probes work.

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

from ..errors import UnauthorizedError

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
    """The token rule as FastAPI dependencies: `require_write` and `require_read`."""

    def __init__(self, token: str) -> None:
        self.token = token

    def token_ok(self, supplied: str) -> bool:
        return bool(self.token) and hmac.compare_digest(
            supplied.strip().encode("utf-8", "replace"), self.token.encode()
        )

    def bearer_ok(self, request: Request) -> bool:
        scheme, _, supplied = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.token_ok(supplied)

    def authenticated(self, request: Request) -> bool:
        return not self.token or self.bearer_ok(request) or self.token_ok(request.cookies.get(SESSION_COOKIE, ""))

    # The routes' dependencies are coroutines though they never wait: FastAPI runs a plain function dependency in
    # its thread pool, a trip there and back (two wake-ups of the event loop) for a header comparison, on every
    # request; at a thousand clients that was 6 % of the server's CPU (bench/RESULTS.md, issue 24).
    async def require_write(self, request: Request) -> None:
        if self.token and not self.bearer_ok(request):
            raise UnauthorizedError("missing or wrong bearer token",
                                    hint="set RL_INSIGHT_TOKEN (training) or --token (CLI) to the server's token")

    async def require_operator(self, request: Request) -> None:
        """Actions a person takes in the UI (request or cancel a profile): bearer token or the UI's session cookie.
        The cookie is SameSite=Strict and every state-changing request passes the cross-site guard below, so a
        foreign page cannot use it."""
        if self.token and not self.authenticated(request):
            raise UnauthorizedError("missing or wrong bearer token or UI session",
                                    hint="sign in on the UI, or send 'Authorization: Bearer <token>'")

    async def require_read(self, request: Request) -> None:
        """Run data, spans, targets and the UI's API calls: bearer token or the UI's session cookie."""
        if self.token and not self.authenticated(request):
            raise UnauthorizedError(
                "missing or wrong bearer token",
                hint="sign in on the UI, or send 'Authorization: Bearer <token>' (`rl-insight server credentials` "
                     "shows it)",
            )


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


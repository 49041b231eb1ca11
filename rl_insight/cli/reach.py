"""Reaching a running rl-insight server from the CLI: which server, with which token, and its errors mapped once.

The one rule for "which server", in order: `--server-url`; the port of upstream's `--config` file on this host;
`RL_INSIGHT_SERVER_URL`; the server this home runs. Nothing else: no guessed address (a command that finds
none says so, or, for scrape targets, writes the home's file that a server reads when it starts).

Errors map to the CLI's error tree here, once: 401 → UnauthorizedError, 404 → NotFoundError, 409 →
ConflictError, other 4xx/5xx → InvalidInputError, unreachable → ServiceError (each with the server's detail).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import env
from ..errors import ConflictError, InvalidInputError, NotFoundError, ServiceError, UnauthorizedError
from ..services.home import Home
from ..services.state import StackState
from ..tls import verified
from .options import config_url

REQUEST_TIMEOUT_S = 10.0


class Server:
    """A running server's base URL and the headers that authenticate to it."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def request(self, method: str, path: str, *, headers: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
        """`path` on this server; the JSON answer, or the CLI's error for what went wrong."""
        import httpx  # here, not at the top: every CLI command (analyze too) imports this module

        url = self.url + path
        try:
            r = httpx.request(method, url, headers={**self.headers, **(headers or {})}, timeout=REQUEST_TIMEOUT_S,
                              trust_env=False, verify=verified(), **kw)
        except httpx.HTTPError as exc:
            raise ServiceError(f"cannot reach the rl-insight server at {url}: {exc}",
                               hint="check `rl-insight server status` or pass --server-url") from None
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {"detail": r.text}
        if r.status_code == 401:
            raise UnauthorizedError(f"the server refused the token: {body.get('detail')}",
                                    hint="pass --token or set RL_INSIGHT_TOKEN")
        if r.status_code == 404:
            raise NotFoundError(str(body.get("detail")), hint=body.get("hint"))
        if r.status_code == 409:
            raise ConflictError(str(body.get("detail")), hint=body.get("hint"))
        if r.status_code >= 400:
            raise InvalidInputError(f"the server refused the request (HTTP {r.status_code}): {body.get('detail')}")
        return body


def find_server(home: Path | None, server_url: str | None, token: str | None, config: Path | None) -> Server | None:
    """The server a command talks to by the one rule above, or None when there is none."""
    h = Home.resolve(home)
    url = server_url or config_url(config) or env.get(env.SERVER_URL) or None
    if not url:
        state = StackState.read(h)
        url = state.ingest_url if state and state.supervisor_alive() else None
    if not url:
        return None
    return Server(url, token or h.running_token())


def require_server(home: Path | None, server_url: str | None, token: str | None, config: Path | None) -> Server:
    server = find_server(home, server_url, token, config)
    if server is None:
        raise ServiceError(f"no rl-insight server is running for home {Home.resolve(home).root}",
                           hint="start one (`rl-insight server start`), or name it: --server-url URL or "
                                "RL_INSIGHT_SERVER_URL")
    return server

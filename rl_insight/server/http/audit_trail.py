"""Hands each answered state-changing action to the audit log (server/access/audit.py), from the app's middleware.

The token check (server/security.py) marks a request as an action (`scope["state"]["audit"]`, with its principal)
when it changes state and is not data a job sends (experiment archive/restore and target removal are actions); this
middleware, pure ASGI like the others, watches the answer go out and, when it succeeded (status < 400), writes who,
from where, what method and path, and what the answer names (its id, name, project, …: the first 16 KiB of a JSON
answer; a route may add what its answer does not say, `scope["state"]["audit_what"]`). The entry is written before
the answer's last part is sent — the answer waits for it, in a worker thread — so an action that was answered is in
the log even if the server is killed right after. A refused attempt on an action route (401, 403) and a wrong
sign-in are logged too, rate-limited by address. Nothing else is read or delayed.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool

from ..access.audit import what_of

Scope = dict[str, Any]
ANSWER_READ = 16 * 1024
LOGIN_PATH = "/api/v1/login"
DATA_PATHS = frozenset({"/api/v1/ingest", "/v1/traces", "/v1/metrics"})  # a job's data: never an action (the hot path)


class AuditTrail:
    def __init__(self, app: Any, audit: Any) -> None:
        self.app, self.audit = app, audit

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if (scope["type"] != "http" or self.audit is None or scope["method"] in ("GET", "HEAD", "OPTIONS")
                or scope["path"] in DATA_PATHS):
            await self.app(scope, receive, send)
            return
        status, body = 0, bytearray()

        async def watch(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                if len(body) < ANSWER_READ:
                    body.extend(message.get("body", b"")[:ANSWER_READ - len(body)])
                if not message.get("more_body", False):
                    await self._record(scope, status, body)  # before the answer's end goes out: written once seen
            await send(message)

        await self.app(scope, receive, watch)

    async def _record(self, scope: Scope, status: int, body: bytearray) -> None:
        state = scope.get("state") or {}
        who = state.get("principal")
        address = str((scope.get("client") or ("?", 0))[0])
        method, path = scope["method"], scope["path"]
        if state.get("audit") and who is not None and status < 400:
            what = {**what_of(bytes(body)), **(state.get("audit_what") or {})}
            entry = self.audit.entry(who.name, who.role, address, method, path, status, what)
            await run_in_threadpool(self.audit.write, entry)
        elif status in (401, 403) and (state.get("action") or path == LOGIN_PATH):
            tried = state.get("refused_who")
            self.audit.refused(tried.name if tried is not None else "(no or an unknown token)",
                               tried.role if tried is not None else "", address, method, path, status,
                               {"why": "wrong sign-in" if path == LOGIN_PATH else
                                "no or an unknown token" if status == 401 else "not allowed"})

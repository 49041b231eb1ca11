"""Hands each answered state-changing action to the audit log (server/access/audit.py), from the app's middleware.

The token check (server/security.py) marks a request as an action (`scope["state"]["audit"]`, with its principal)
when it changes state and is not data a job sends; this middleware, pure ASGI like the others, watches the answer go
out and, when it succeeded (status < 400), records who, from where, what method and path, and what the answer names
(its id, name, project, …: the first 16 KiB of a JSON answer). The entry is queued before the answer's last part is
sent, so a client that saw its answer finds its action in the log after a flush. Nothing else is read or delayed.
"""

from __future__ import annotations

from typing import Any

from ..access.audit import what_of

Scope = dict[str, Any]
ANSWER_READ = 16 * 1024
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
                    self._record(scope, status, body)  # before the answer's end goes out: logged once it is seen
            await send(message)

        await self.app(scope, receive, watch)

    def _record(self, scope: Scope, status: int, body: bytearray) -> None:
        state = scope.get("state") or {}
        who = state.get("principal")
        if state.get("audit") and who is not None and status < 400:
            client = scope.get("client") or ("?", 0)
            self.audit.record(who.name, who.role, str(client[0]), scope["method"], scope["path"], status,
                              what_of(bytes(body)))

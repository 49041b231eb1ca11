"""Alertmanager's HTTP API as the server uses it: reload the configuration, post alerts (API v2), read and change
silences. Blocking calls, made from the server's worker threads, never from the event loop.

Invariant: every failure is an `AlertmanagerError` whose message is Alertmanager's own answer (or why there was
none), never a secret: the configuration is not echoed.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from ....errors import NotFoundError, RLInsightError
from ....tls import verified

TIMEOUT_S = 5.0


def rfc3339(t: float) -> str:
    """Unix seconds as the timestamps Alertmanager's API takes (UTC, milliseconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


class AlertmanagerError(RLInsightError):
    """Alertmanager answered with a refusal (its reason is the message; `status` its HTTP status)."""

    http_status = 422  # (not 5xx: this server answered; the UI reads 5xx as "the server is away")
    status = 0


class AlertmanagerDown(AlertmanagerError):
    """Alertmanager did not answer at all (not running, or not reachable)."""

    http_status = 409


class Alertmanager:
    def __init__(self, url: str, timeout_s: float = TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(timeout=timeout_s, trust_env=False, verify=verified())

    def close(self) -> None:
        self._client.close()

    def _call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            r = self._client.request(method, self.url + path, **kw)
        except httpx.HTTPError as exc:
            raise AlertmanagerDown(f"Alertmanager at {self.url} did not answer: {type(exc).__name__}: {exc}",
                                    hint="is it running? `rl-insight server status`") from None
        if r.status_code >= 300:
            err = AlertmanagerError(f"Alertmanager refused {method} {path}: HTTP {r.status_code}: "
                                    f"{r.text.strip()[:500]}")
            err.status = r.status_code
            raise err
        return r

    def ready(self) -> bool:
        try:
            return self._client.get(self.url + "/-/ready").status_code == 200
        except httpx.HTTPError:
            return False

    def reload(self) -> None:
        """Alertmanager reads its configuration file again; its reason when it refuses the file."""
        self._call("POST", "/-/reload")

    def post_alerts(self, alerts: list[dict[str, Any]]) -> None:
        self._call("POST", "/api/v2/alerts", json=alerts)

    def silences(self) -> list[dict[str, Any]]:
        data = self._call("GET", "/api/v2/silences").json()
        return data if isinstance(data, list) else []

    def add_silence(self, silence: dict[str, Any]) -> str:
        return str(self._call("POST", "/api/v2/silences", json=silence).json().get("silenceID", ""))

    def expire_silence(self, silence_id: str) -> None:
        try:
            self._call("DELETE", f"/api/v2/silence/{silence_id}")
        except AlertmanagerError as exc:
            if exc.status in (404, 500) and "not found" in exc.message:
                raise NotFoundError(f"no silence {silence_id!r}") from None
            raise

"""A small async client for the Prometheus HTTP API the ingest server manages (queries, rules).

The browser never talks to Prometheus and never sends PromQL: routes build queries from
`rl_insight/semantics/panels.py` and the run's identity, and call this client. Every call is bounded in
time; failures become `PrometheusUnavailable` with a message that names the URL and the cause.
"""

from __future__ import annotations

import math
from typing import Any

import httpx

from ...tls import verified


class PrometheusUnavailable(Exception):
    """Prometheus is not configured, does not answer, or refused the query."""


def sample_value(text: str) -> float | None:
    """Prometheus sends values as strings; NaN and ±Inf become None (JSON has no spelling for them)."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


class PrometheusApi:
    def __init__(self, url: str | None, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/") if url else None
        self.timeout_s = timeout_s

    @property
    def configured(self) -> bool:
        return self.url is not None

    def session(self) -> httpx.AsyncClient:
        """One connection pool per request handler (several queries run concurrently on it)."""
        return httpx.AsyncClient(timeout=self.timeout_s, trust_env=False, verify=verified())

    async def _get(self, client: httpx.AsyncClient, path: str, params: dict[str, Any]) -> Any:
        if self.url is None:
            raise PrometheusUnavailable("no Prometheus is managed by this server (start it with `rl-insight server "
                                        "start`)")
        try:
            r = await client.get(self.url + path, params=params)
        except httpx.HTTPError as e:
            raise PrometheusUnavailable(f"Prometheus at {self.url} did not answer: {type(e).__name__}: {e}") from None
        try:
            body = r.json()
        except ValueError:
            raise PrometheusUnavailable(
                f"Prometheus at {self.url}{path} answered HTTP {r.status_code} without JSON"
            ) from None
        if not isinstance(body, dict) or body.get("status") != "success":
            err = body.get("error", f"HTTP {r.status_code}") if isinstance(body, dict) else f"HTTP {r.status_code}"
            raise PrometheusUnavailable(f"Prometheus refused the query: {err}")
        return body.get("data")

    async def query(self, client: httpx.AsyncClient, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = await self._get(client, "/api/v1/query", params)
        return data.get("result", []) if isinstance(data, dict) else []

    async def query_range(self, client: httpx.AsyncClient, expr: str, start: float, end: float,
                          step_s: float) -> list[dict[str, Any]]:
        data = await self._get(client, "/api/v1/query_range",
                               {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s:g}"})
        return data.get("result", []) if isinstance(data, dict) else []

    async def active_targets(self, client: httpx.AsyncClient) -> list[dict[str, Any]]:
        """Prometheus' active scrape targets (labels, health)."""
        data = await self._get(client, "/api/v1/targets", {"state": "active"})
        targets = data.get("activeTargets", []) if isinstance(data, dict) else []
        return [t for t in targets if isinstance(t, dict) and isinstance(t.get("labels"), dict)]

    async def alert_rules(self, client: httpx.AsyncClient) -> list[dict[str, Any]]:
        """Every alerting rule with its state and active alerts (annotations rendered by Prometheus)."""
        data = await self._get(client, "/api/v1/rules", {"type": "alert"})
        groups = data.get("groups", []) if isinstance(data, dict) else []
        return [r for g in groups for r in g.get("rules", []) if r.get("type") == "alerting"]

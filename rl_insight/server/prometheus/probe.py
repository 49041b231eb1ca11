"""Whether a service (Prometheus) is up, and its scrape targets' health, as /api/v1/services and a run's targets show
them: asked over HTTP, cached briefly, never raising (a service that does not answer is "down")."""

from __future__ import annotations

import time
from typing import Any

import httpx

from ...tls import verified


class ServiceProbe:
    """Answers 'is Prometheus up?' for /api/v1/services, cached briefly so the route stays cheap."""

    def __init__(self, url: str | None, ready_path: str) -> None:
        self.url = url.rstrip("/") if url else None
        self._path = ready_path
        self._cached: tuple[float, str] = (0.0, "unknown")

    async def _targets(self) -> list[dict[str, Any]] | None:
        from .api import PrometheusApi, PrometheusUnavailable

        api = PrometheusApi(self.url, timeout_s=2.0)
        try:
            async with api.session() as client:
                return await api.active_targets(client)
        except PrometheusUnavailable:
            return None

    async def target_health(self) -> dict[tuple[str, str], str]:
        """{(job, instance): "up"|"down"|"unknown"} from Prometheus' target API; empty when it does not answer."""
        active = await self._targets() if self.url is not None else None
        return {
            (t["labels"].get("job", ""), t["labels"].get("instance", "")): t.get("health", "unknown")
            for t in active or []
        }

    async def active_targets(self) -> list[dict[str, str]] | None:
        """Label sets of Prometheus' active targets, or None when it does not answer."""
        active = await self._targets() if self.url is not None else None
        return None if active is None else [t["labels"] for t in active]

    async def state(self) -> str:
        if self.url is None:
            return "not_configured"
        now = time.monotonic()
        if now - self._cached[0] < 5.0:
            return self._cached[1]
        try:
            async with httpx.AsyncClient(timeout=1.0, trust_env=False, verify=verified()) as client:
                r = await client.get(self.url + self._path)
            state = "running" if r.status_code == 200 else f"not_ready (HTTP {r.status_code})"
        except httpx.HTTPError:
            state = "down"
        self._cached = (now, state)
        return state

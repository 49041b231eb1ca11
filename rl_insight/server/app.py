"""FastAPI app factory: ingest, /metrics, target registry, health and service discovery."""

from __future__ import annotations

import hmac
import time
import uuid
from typing import Any

import httpx
from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .._version import __version__
from ..errors import PayloadTooLargeError, RLInsightError, UnauthorizedError
from .config import ServerConfig
from .ingest import decode_body, ingest_batch
from .metric_store import MetricStore, StoreCollector
from .spans import MemorySpanSink
from .targets import TargetRegistry, parse_registration


class ServerMetrics:
    """The server's own metrics (`rl_insight_server_*`), in the app's isolated registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        p = "rl_insight_server_"
        self.requests = Counter(p + "http_requests", "HTTP requests by route and status", ["route", "method", "status"], registry=registry)
        self.accepted = Counter(p + "ingest_items_accepted", "Ingested items stored, by section", ["section"], registry=registry)
        self.rejected = Counter(p + "ingest_items_rejected", "Ingested items refused, by reason", ["reason"], registry=registry)
        self.latency = Histogram(p + "ingest_duration_seconds", "Time to decode, validate and store one ingest batch",
                                 buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5), registry=registry)
        self.series = Gauge(p + "series", "Trainer series currently exposed", registry=registry)
        self.open_states = Gauge(p + "open_states", "RL states that have started and not yet ended", registry=registry)
        self.targets = Gauge(p + "targets", "Registered scrape targets", registry=registry)
        info = Gauge(p + "build_info", "Server version", ["version"], registry=registry)
        info.labels(__version__).set(1)


class ServiceProbe:
    """Answers 'is Prometheus up?' for /api/v1/services, cached briefly so the route stays cheap."""

    def __init__(self, url: str | None, ready_path: str) -> None:
        self.url = url.rstrip("/") if url else None
        self._path = ready_path
        self._cached: tuple[float, str] = (0.0, "unknown")

    async def state(self) -> str:
        if self.url is None:
            return "not_configured"
        now = time.monotonic()
        if now - self._cached[0] < 5.0:
            return self._cached[1]
        try:
            async with httpx.AsyncClient(timeout=1.0, trust_env=False) as client:
                r = await client.get(self.url + self._path)
            state = "running" if r.status_code == 200 else f"not_ready (HTTP {r.status_code})"
        except httpx.HTTPError:
            state = "down"
        self._cached = (now, state)
        return state


def create_app(config: ServerConfig) -> FastAPI:
    disable_created_metrics()  # `_created` series double the exposition and no dashboard uses them
    app = FastAPI(title="RL-Insight server", version=__version__,
                  description="Ingest and discovery API of rl-insight. State-changing routes need the bearer token when one is configured.")
    registry = CollectorRegistry(auto_describe=False)
    store = MetricStore(config.series_ttl_s, config.max_series_per_metric)
    registry.register(StoreCollector(store))
    metrics = ServerMetrics(registry)
    spans = MemorySpanSink()
    targets = TargetRegistry(config.targets_file, config.max_targets)
    prometheus = ServiceProbe(config.prometheus_url, "/-/ready")
    boot_id = uuid.uuid4().hex
    app.state.store, app.state.spans, app.state.targets, app.state.config = store, spans, targets, config

    @app.exception_handler(RLInsightError)
    async def _rl_error(request: Request, exc: RLInsightError) -> JSONResponse:
        body: dict[str, Any] = {"detail": exc.message}
        if exc.hint:
            body["hint"] = exc.hint
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, UnauthorizedError) else None
        return JSONResponse(body, status_code=exc.http_status, headers=headers)

    @app.middleware("http")
    async def _count_requests(request: Request, call_next: Any) -> Response:
        response = await call_next(request)
        route = request.scope.get("route")
        metrics.requests.labels(getattr(route, "path", "unmatched"), request.method, str(response.status_code)).inc()
        return response

    def require_token(request: Request) -> None:
        if not config.token:
            return
        header = request.headers.get("authorization", "")
        scheme, _, supplied = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(supplied.strip().encode(), config.token.encode()):
            raise UnauthorizedError("missing or wrong bearer token",
                                    hint="set RL_INSIGHT_TOKEN (training) or --token (CLI) to the server's token")

    async def read_body(request: Request) -> bytes:
        limit = config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise PayloadTooLargeError(f"body of {declared} bytes exceeds the limit of {limit} bytes",
                                       hint="send smaller batches or raise max_body_bytes")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLargeError(f"body exceeds the limit of {limit} bytes", hint="send smaller batches or raise max_body_bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "version": __version__, "boot_id": boot_id}

    @app.get("/api/v1/services")
    async def services(request: Request) -> dict[str, Any]:
        prom_state = await prometheus.state()
        prom_port = None
        if prometheus.url and prom_state == "running":
            prom_port = httpx.URL(prometheus.url).port
        return {
            "status": "ok",
            "otlp_port": None,  # Tempo is not managed yet: null, as upstream reports a disabled service
            "prometheus_port": prom_port,
            "grafana_port": None,
            "services": {
                "ingest": {"url": str(request.base_url).rstrip("/"), "state": "running", "version": __version__},
                "prometheus": {"url": prometheus.url, "state": prom_state},
                "tempo": {"url": None, "state": "not_configured"},
                "grafana": {"url": config.grafana_url, "state": "not_configured"},
            },
        }

    @app.post("/api/v1/ingest", dependencies=[Depends(require_token)])
    async def ingest(request: Request) -> JSONResponse:
        """A batch of metric samples, span starts and finished spans (see rl_insight/client/exporter.py)."""
        started = time.perf_counter()
        raw = await read_body(request)
        batch = decode_body(raw, request.headers.get("content-encoding"), config.max_body_bytes)
        result = ingest_batch(batch, store, spans)
        for section, n in result.accepted_by_section.items():
            metrics.accepted.labels(section).inc(n)
        for reason, n in result.reasons.items():
            metrics.rejected.labels(reason).inc(n)
        metrics.latency.observe(time.perf_counter() - started)
        body = {"accepted": result.accepted, "rejected": result.rejected, "errors": result.errors, "boot_id": boot_id}
        status = 422 if result.rejected and not result.accepted else 200
        return JSONResponse(body, status_code=status)

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        metrics.series.set(store.series_count())
        metrics.open_states.set(spans.open_count())
        metrics.targets.set(len(targets.list()))
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/api/v1/prometheus/targets", dependencies=[Depends(require_token)])
    async def register_targets(request: Request) -> dict[str, Any]:
        """Upstream-compatible registration: `targets` (strings or {target, labels}), `labels`, `job_name`."""
        raw = await read_body(request)
        job, items = parse_registration(decode_body(raw, request.headers.get("content-encoding"), config.max_body_bytes))
        count = targets.upsert(job, items)
        return {"status": "ok", "prometheus_reloaded": False, "reload_needed": False, "job_name": job,
                "target_count": count, "targets_file": str(targets.path)}

    @app.get("/api/v1/targets")
    async def list_targets(job: str | None = None) -> dict[str, Any]:
        found = [t.to_api() for t in targets.list(job)]
        return {"targets": found, "count": len(found), "targets_file": str(targets.path)}

    @app.delete("/api/v1/targets", dependencies=[Depends(require_token)])
    async def delete_targets(target: str | None = None, job: str | None = None,
                             project: str | None = None, experiment_name: str | None = None) -> dict[str, Any]:
        """Remove one target (`target`, optionally with `job`), a whole `job`, or an experiment's targets."""
        removed = targets.remove(target=target, job=job, project=project, experiment_name=experiment_name)
        return {"status": "ok", "removed": removed}

    @app.get("/api/v1/spans/open")
    async def open_spans() -> dict[str, Any]:
        """RL states that have started and not ended (a stuck rollout shows up here)."""
        items = spans.open_states()
        return {"spans": items, "count": len(items)}

    @app.get("/api/v1/spans/recent")
    async def recent_spans(limit: int = Query(1000, ge=1, le=10_000)) -> dict[str, Any]:
        items = spans.recent(limit)
        return {"spans": items, "count": len(items)}

    return app

"""FastAPI app factory: ingest, /metrics, target registry, health and service discovery."""

from __future__ import annotations

import hmac
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

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
from .insight_service import InsightService
from .otlp import OtlpForwarder, endpoint_from_env
from .routes_runs import build_router
from .runstore import RunStoreReader, RunStoreWriter
from .spans import MemorySpanSink
from .targets import TargetRegistry, parse_registration
from .ui import mount_ui


SESSION_COOKIE = "rl_insight_session"


class OtlpCollector:
    """Span forwarding health on /metrics."""

    def __init__(self, forwarder: OtlpForwarder) -> None:
        self._f = forwarder

    def collect(self) -> Any:
        from prometheus_client.metrics_core import CounterMetricFamily

        sent = CounterMetricFamily("rl_insight_server_otlp_spans_sent", "Spans accepted by the OTLP receiver (Tempo)")
        sent.add_metric([], self._f.sent)
        dropped = CounterMetricFamily("rl_insight_server_otlp_spans_dropped", "Spans not forwarded, by reason", labels=["reason"])
        for reason, n in self._f.dropped.items():
            dropped.add_metric([reason], n)
        return [sent, dropped]


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

    async def target_health(self) -> dict[tuple[str, str], str]:
        """{(job, instance): "up"|"down"|"unknown"} from Prometheus' target API; empty when it does not answer."""
        if self.url is None:
            return {}
        try:
            async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
                r = await client.get(self.url + "/api/v1/targets", params={"state": "active"})
            active = r.json()["data"]["activeTargets"]
        except (httpx.HTTPError, ValueError, KeyError):
            return {}
        return {(t["labels"].get("job", ""), t["labels"].get("instance", "")): t.get("health", "unknown") for t in active}

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


class RunStoreHealthCollector:
    """Run store health on /metrics."""

    def __init__(self, writer: RunStoreWriter) -> None:
        self._w = writer

    def collect(self) -> Any:
        from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

        st = self._w.stats
        written = CounterMetricFamily("rl_insight_server_store_items_written", "Items written to the run store", labels=["kind"])
        written.add_metric(["samples"], st.samples)
        written.add_metric(["spans"], st.spans)
        dropped = CounterMetricFamily("rl_insight_server_store_items_dropped", "Items the run store could not take",
                                      labels=["reason"])
        for reason, n in st.by_reason.items():
            dropped.add_metric([reason], n)
        queue = GaugeMetricFamily("rl_insight_server_store_queue_items", "Items waiting for the run store writer")
        queue.add_metric([], st.queue_items)
        degraded = GaugeMetricFamily("rl_insight_server_store_degraded", "1 while run store writes fail (e.g. disk full)")
        degraded.add_metric([], 1 if st.degraded_since else 0)
        return [written, dropped, queue, degraded]


def create_app(config: ServerConfig) -> FastAPI:
    disable_created_metrics()  # `_created` series double the exposition and no dashboard uses them
    writer = RunStoreWriter(config.store_file, retention_days=config.retention_days,
                            max_bytes=config.store_max_bytes) if config.store_enabled else None
    reader = RunStoreReader(config.store_file) if writer is not None else None
    insight = (InsightService(reader, window_s=config.insights_window_s, live_window_s=config.live_window_s,
                              step_metric=config.step_metric, version_metric=config.version_metric)
               if reader is not None else None)
    forwarder = (OtlpForwarder(config.otlp_endpoint, config.otlp_protocol, max_queue=config.otlp_queue)
                 if config.otlp_endpoint or endpoint_from_env() else None)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if insight is not None:
            insight.start()
        yield
        if insight is not None:
            insight.stop()
        if forwarder is not None:
            forwarder.shutdown()
        if writer is not None:
            writer.close()

    app = FastAPI(title="RL-Insight server", version=__version__, lifespan=lifespan,
                  description="Ingest, discovery and run-store API of rl-insight. State-changing routes need the bearer "
                              "token when one is configured; so do the run-store reads and the UI.")
    registry = CollectorRegistry(auto_describe=False)
    store = MetricStore(config.series_ttl_s, config.max_series_per_metric)
    registry.register(StoreCollector(store))
    metrics = ServerMetrics(registry)
    spans = MemorySpanSink()
    targets = TargetRegistry(config.targets_file, config.max_targets)
    prometheus = ServiceProbe(config.prometheus_url, "/-/ready")
    tempo = ServiceProbe(config.tempo_url, "/ready")
    grafana = ServiceProbe(config.grafana_url, "/api/health")
    boot_id = uuid.uuid4().hex
    app.state.store, app.state.spans, app.state.targets, app.state.config = store, spans, targets, config
    app.state.writer, app.state.reader, app.state.insight, app.state.forwarder = writer, reader, insight, forwarder
    if forwarder is not None:
        registry.register(OtlpCollector(forwarder))
    if writer is not None:
        registry.register(RunStoreHealthCollector(writer))
    if insight is not None:
        registry.register(insight)

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

    def token_ok(supplied: str) -> bool:
        return hmac.compare_digest(supplied.strip().encode(), config.token.encode())

    def require_token(request: Request) -> None:
        if not config.token:
            return
        header = request.headers.get("authorization", "")
        scheme, _, supplied = header.partition(" ")
        if scheme.lower() != "bearer" or not token_ok(supplied):
            raise UnauthorizedError("missing or wrong bearer token",
                                    hint="set RL_INSIGHT_TOKEN (training) or --token (CLI) to the server's token")

    def require_read(request: Request) -> None:
        """Run data and the UI: the bearer token or the UI's session cookie, when a token is configured."""
        if not config.token:
            return
        cookie = request.cookies.get(SESSION_COOKIE, "")
        if cookie and token_ok(cookie):
            return
        require_token(request)

    @app.post("/api/v1/login")
    async def login(request: Request) -> JSONResponse:
        """Exchange the token for an HttpOnly session cookie (used by the built-in UI)."""
        try:
            body = await request.json()
        except ValueError:
            body = {}
        supplied = body.get("token") if isinstance(body, dict) else None
        if config.token and (not isinstance(supplied, str) or not token_ok(supplied)):
            raise UnauthorizedError("wrong token", hint="use the token printed by `rl-insight server start` (<home>/token)")
        resp = JSONResponse({"status": "ok"})
        if config.token:
            resp.set_cookie(SESSION_COOKIE, config.token, httponly=True, samesite="strict", max_age=30 * 86400)
        return resp

    @app.get("/api/v1/session")
    async def session(request: Request) -> dict[str, Any]:
        authed = not config.token or token_ok(request.cookies.get(SESSION_COOKIE, "")) or \
            token_ok(request.headers.get("authorization", "").partition(" ")[2])
        return {"auth_required": bool(config.token), "authenticated": authed,
                "prometheus_url": prometheus.url, "grafana_url": config.grafana_url, "version": __version__}

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
        body: dict[str, Any] = {"status": "ok", "version": __version__, "boot_id": boot_id}
        if writer is not None:
            st = writer.stats
            body["store"] = {"path": str(writer.path), "degraded": st.degraded_since is not None, "last_error": st.last_error,
                             "dropped": st.dropped}
        return body

    @app.get("/api/v1/services")
    async def services(request: Request) -> dict[str, Any]:
        """Upstream's discovery fields (ports are null when a service does not run) plus each service's URL and state."""
        prom_state, tempo_state, grafana_state = await prometheus.state(), await tempo.state(), await grafana.state()
        otlp = httpx.URL(config.otlp_endpoint) if config.otlp_endpoint else None
        return {
            "status": "ok",
            "otlp_port": otlp.port if otlp is not None and (tempo_state == "running" or config.tempo_url is None) else None,
            "prometheus_port": httpx.URL(prometheus.url).port if prometheus.url and prom_state == "running" else None,
            "grafana_port": httpx.URL(grafana.url).port if grafana.url and grafana_state == "running" else None,
            "services": {
                "ingest": {"url": str(request.base_url).rstrip("/"), "state": "running", "version": __version__},
                "prometheus": {"url": prometheus.url, "state": prom_state},
                "tempo": {"url": tempo.url, "state": tempo_state, "otlp_endpoint": config.otlp_endpoint,
                          "otlp_protocol": config.otlp_protocol if forwarder else None},
                "grafana": {"url": grafana.url, "state": grafana_state},
            },
        }

    @app.post("/api/v1/ingest", dependencies=[Depends(require_token)])
    async def ingest(request: Request) -> JSONResponse:
        """A batch of metric samples, span starts and finished spans (see rl_insight/client/exporter.py)."""
        started = time.perf_counter()
        raw = await read_body(request)
        batch = decode_body(raw, request.headers.get("content-encoding"), config.max_body_bytes)
        result = ingest_batch(batch, store, spans, writer)
        if forwarder is not None and result.finished_spans:
            forwarder.add(result.finished_spans, result.client_host)
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

    @app.get("/api/v1/runs/{run_id}/targets", dependencies=[Depends(require_read)])
    async def run_targets(run_id: int) -> dict[str, Any]:
        """The run's registered targets (labels project/experiment_name) with health from Prometheus when it runs."""
        if reader is None:
            raise RLInsightError("the run store is disabled on this server")
        from .runstore import queries as q

        run = q.get_run(reader.conn(), run_id)
        mine = [t.to_api() for t in targets.list()
                if t.to_api()["labels"].get("project") == run["project"]
                and t.to_api()["labels"].get("experiment_name") == run["experiment_name"]]
        health = await prometheus.target_health()
        for t in mine:
            t["health"] = health.get((t["job"], t["target"]), "unknown" if health else None)
        return {"run_id": run_id, "targets": mine}

    @app.get("/api/v1/spans/open")
    async def open_spans() -> dict[str, Any]:
        """RL states that have started and not ended (a stuck rollout shows up here)."""
        items = spans.open_states()
        return {"spans": items, "count": len(items)}

    @app.get("/api/v1/spans/recent")
    async def recent_spans(limit: int = Query(1000, ge=1, le=10_000)) -> dict[str, Any]:
        items = spans.recent(limit)
        return {"spans": items, "count": len(items)}

    if reader is not None:
        app.include_router(build_router(reader, live_window_s=config.live_window_s, step_metric=config.step_metric,
                                        version_metric=config.version_metric, require_read=require_read))
    mount_ui(app, require_read)
    return app

"""Open routes: health, service discovery, the Prometheus exposition.

The answers are typed here (no postponed annotations in this module: `NotRequired` is read at import)."""

import hmac
from typing import Literal

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from typing_extensions import NotRequired, TypedDict

from ..._version import __version__
from ...errors import UnauthorizedError
from ..access.declared import declare
from ..fleet.coordinator import FleetHealth
from ..live.insights.service import InsightHealth
from ..rooms.alerting.notifications import OFF_HINT
from ..rooms.alerting.parts import alerting_of
from ..routing.models import typed_answer
from ..runstore.backend import SCHEMA_VERSION
from ..runstore.backend.checkpoints import CheckpointHealth
from ..runstore.spans.span_lod import SummaryHealth
from ..state import AppState


class StoreHealth(TypedDict):
    """The run store: its backend and where it is, how far the writer lags, whether it is degraded and why, what it
    dropped, its integrity ("ok", "checking", or what the check found), the timeline summary and the checkpoints
    (null on PostgreSQL)."""

    backend: str
    path: str
    schema_version: int
    lag_s: float
    queued_items: int
    degraded: bool
    last_error: str | None
    dropped: int
    integrity: str
    timeline_summary: SummaryHealth
    checkpoints: CheckpointHealth | None


class NotificationHealth(TypedDict):
    """Notifications: whether an Alertmanager delivers them (and how to turn them on when not), and the server's own
    alerts posted to it and the rounds whose post failed."""

    enabled: bool
    alertmanager_url: str | None
    alerts_posted: int
    failed_posts: int
    message: str


class Health(TypedDict):
    """The server answers; with a run store, the insight rounds and a fleet, their state too. `boot_id` changes on
    every start (a client that sees it change resends its cumulative counters)."""

    status: Literal["ok"]
    version: str
    boot_id: str
    store: NotRequired[StoreHealth]
    insights: NotRequired[InsightHealth]
    fleet: NotRequired[FleetHealth]
    notifications: NotificationHealth


class IngestService(TypedDict):
    url: str
    state: Literal["running"]
    version: str


class PrometheusService(TypedDict):
    url: str | None
    state: str
    query_url: str | None  # where panels and alerts are read (the managed Prometheus, or --prometheus-url)


class TempoService(TypedDict):
    url: str | None
    state: str
    otlp_endpoint: str | None
    otlp_protocol: str | None  # how this server forwards OTLP traces to it (null when it does not)


class GrafanaService(TypedDict):
    url: str | None
    state: str


class AlertmanagerService(TypedDict):
    url: str | None
    state: str


class ServiceMap(TypedDict):
    ingest: IngestService
    prometheus: PrometheusService
    alertmanager: AlertmanagerService
    tempo: TempoService
    grafana: GrafanaService


class Services(TypedDict):
    """Upstream's discovery fields (a port is null when its service does not run) and each service's URL and state."""

    status: Literal["ok"]
    otlp_port: int | None
    prometheus_port: int | None
    grafana_port: int | None
    services: ServiceMap


def build_router(st: AppState) -> APIRouter:
    r = APIRouter(tags=["health"])

    @r.get("/healthz", **declare(st.auth, "open", "open"),
           **typed_answer(Health, "the server, its run store, insight rounds and fleet"))
    async def healthz() -> Health:
        alerting = alerting_of(st)
        events, notifications = alerting.events, alerting.notifications
        body: Health = {"status": "ok", "version": __version__, "boot_id": st.boot_id, "notifications": {
            "enabled": notifications.am is not None, "alertmanager_url": st.config.alertmanager_url,
            "alerts_posted": events.posted if events else 0, "failed_posts": events.failed if events else 0,
            "message": "on" if notifications.am is not None else OFF_HINT}}
        if st.writer is not None:
            ws = st.writer.stats
            body["store"] = {"backend": st.writer.backend.dialect.name, "path": st.writer.location.display,
                             "schema_version": SCHEMA_VERSION, "lag_s": round(st.writer.lag_s(), 3),
                             "queued_items": ws.queue_items, "degraded": ws.degraded_since is not None,
                             "last_error": ws.last_error, "dropped": ws.dropped, "integrity": st.writer.integrity,
                             "timeline_summary": st.writer.summary_health(),
                             "checkpoints": st.writer.checkpoint_health()}
        if st.insight is not None:
            body["insights"] = st.insight.health()
        if st.fleet is not None:
            body["fleet"] = st.fleet.health()
        return body

    @r.get("/api/v1/services", **declare(st.auth, "open", "open"),
           **typed_answer(Services, "the managed services and where they answer"))
    async def services(request: Request) -> Services:
        """Upstream's discovery fields (ports are null when a service does not run) plus each service's URL and
        state."""
        cfg = st.config
        prom_state, am_state, tempo_state, grafana_state = (
            await st.prometheus.state(),
            await st.alertmanager.state(),
            await st.tempo.state(),
            await st.grafana.state(),
        )
        otlp = httpx.URL(cfg.otlp_endpoint) if cfg.otlp_endpoint else None
        return {
            "status": "ok",
            "otlp_port": otlp.port
            if otlp is not None and (tempo_state == "running" or cfg.tempo_url is None)
            else None,
            "prometheus_port": httpx.URL(st.prometheus.url).port
            if st.prometheus.url and prom_state == "running"
            else None,
            "grafana_port": httpx.URL(st.grafana.url).port if st.grafana.url and grafana_state == "running" else None,
            "services": {
                "ingest": {"url": str(request.base_url).rstrip("/"), "state": "running", "version": __version__},
                "prometheus": {"url": st.prometheus.url, "state": prom_state, "query_url": cfg.prometheus_url},
                "alertmanager": {"url": st.alertmanager.url, "state": am_state},
                "tempo": {
                    "url": st.tempo.url,
                    "state": tempo_state,
                    "otlp_endpoint": cfg.otlp_endpoint,
                    "otlp_protocol": cfg.otlp_protocol if st.forwarder else None,
                },
                "grafana": {"url": st.grafana.url, "state": grafana_state},
            },
        }

    @r.get("/metrics", **declare(st.auth, "scrape", "global"),
           response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
    def prometheus_metrics(request: Request) -> Response:
        """Trainer scalars (`rl_insight_monitor_*`), client and server self-metrics, live insight metrics. With
        `--metrics-token` (they name every run) only for that bearer token, or the server's own."""
        if st.config.metrics_token:
            scheme, _, supplied = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not (hmac.compare_digest(supplied.strip().encode("utf-8", "replace"),
                                                                      st.config.metrics_token.encode())
                                                  or st.auth.token_ok(supplied)):
                raise UnauthorizedError("/metrics needs the scrape token (this server was started with "
                                        "--metrics-token)", hint="scrape with 'authorization: credentials_file' "
                                                                 "naming a file that holds it (docs/access.md)")
        m = st.metrics
        m.series.set(st.store.series_count())
        m.store_bytes.set(st.store.bytes_used)
        m.open_states.set(st.memory_spans.open_count())
        m.targets.set(len(st.targets.list()))
        m.clients.set(st.clients.live_clients())
        m.cut_short.set(st.clients.cut_short)
        body = generate_latest(st.registry)
        if st.insight is not None:  # rendered once a round, where the round ran (per lane: 1.8 MB at 5,000 lanes)
            body += st.insight.exposition()
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return r

"""The supervisor's own options (`StackSettings`): what `rl-insight server start` says beyond the ingest server's
`ServerConfig`, each declared once with its help (server/config.py `option`). Apart from the supervisor so that the CLI
reads them without loading the service stack."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..server.config import ServerConfig, option
from .home import Home


@dataclass(frozen=True)
class StackSettings:
    home: Home
    # the ingest server's own options (host, port, token, run store, exports, OTLP): one ServerConfig, never restated;
    # the supervisor fills in what it decides (ports picked, where the other services run, the data directory)
    server: ServerConfig = field(default_factory=ServerConfig)
    log_dir: Path | None = option(None, "Directory for service logs (default <home>/logs).")
    prometheus: bool = option(
        True, "Run Prometheus (--no-prometheus: only the ingest server).", flag="--prometheus/--no-prometheus")
    prometheus_bin: str | None = option(None, "Prometheus binary to use.")
    prometheus_host: str = option("127.0.0.1", "Prometheus bind address (loopback by default).")
    prometheus_port: int = option(9090, "Prometheus port.")
    scrape_interval: str = option("10s", "Prometheus scrape interval.")
    retention: str = option("30d", "Prometheus TSDB retention time.")
    auto_port: bool = option(False, "Pick free ports for every service whose port is busy.")
    data_dir: Path | None = None  # default <home>/data (upstream's server.data_dir)
    extra_dashboard_dir: Path | None = option(None, "More Grafana dashboards (classic JSON) provisioned next to ours.")
    ready_timeout: float = option(60.0, "Seconds to wait for each service to become ready.")
    remote_write_url: str | None = option(None, "Prometheus remote_write URL (Mimir, Thanos, VictoriaMetrics).")
    alertmanager: bool = option(
        True, "Run Alertmanager (when installed): notifications to webhooks, Slack and email (docs/alerts.md).",
        flag="--alertmanager/--no-alertmanager")
    alertmanager_bin: str | None = option(None, "Alertmanager binary to use (Debian: prometheus-alertmanager).")
    alertmanager_host: str = option(
        "127.0.0.1", "Alertmanager bind address (loopback by default: its API is not authenticated).")
    alertmanager_port: int = option(9093, "Alertmanager port.")
    tempo: bool = option(True, "Run Tempo (when installed).", flag="--tempo/--no-tempo")
    tempo_bin: str | None = option(None, "Tempo binary to use.")
    tempo_host: str = option("127.0.0.1", "Tempo HTTP API bind address.")
    tempo_port: int = option(3200, "Tempo HTTP API port.")
    otlp_host: str = option("127.0.0.1", "Tempo OTLP receivers' bind address (0.0.0.0 to accept other hosts).")
    otlp_grpc_port: int = option(4317, "Tempo OTLP gRPC port.")
    otlp_http_port: int = option(4318, "Tempo OTLP HTTP port.")
    tempo_grpc_port: int = 9095
    tempo_memberlist_port: int = 7946
    tempo_retention: str = option("720h", "Tempo block retention.")
    grafana: bool = option(True, "Run Grafana (when installed).", flag="--grafana/--no-grafana")
    grafana_bin: str | None = option(None, "Grafana binary to use (grafana or grafana-server).")
    grafana_host: str = option("0.0.0.0", "Grafana bind address (behind its login).")
    grafana_port: int = option(3000, "Grafana port.")

    @property
    def logs(self) -> Path:
        return self.log_dir or self.home.logs_dir

"""The supervisor's own options (`StackSettings`): what `rl-insight server start` says beyond the ingest server's
`ServerConfig`. Apart from the supervisor so that the CLI reads their defaults without loading the service stack."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..server.config import ServerConfig
from .home import Home


@dataclass(frozen=True)
class StackSettings:
    home: Home
    # the ingest server's own options (host, port, token, run store, exports, OTLP): one ServerConfig, never restated;
    # the supervisor fills in what it decides (ports picked, where the other services run, the data directory)
    server: ServerConfig = field(default_factory=ServerConfig)
    log_dir: Path | None = None
    prometheus: bool = True
    prometheus_bin: str | None = None
    prometheus_host: str = "127.0.0.1"  # its lifecycle and admin surface must not face the network
    prometheus_port: int = 9090
    scrape_interval: str = "10s"
    retention: str = "30d"
    auto_port: bool = False
    data_dir: Path | None = None  # default <home>/data (upstream's server.data_dir)
    extra_dashboard_dir: Path | None = None  # more Grafana dashboards, provisioned next to ours
    ready_timeout: float = 60.0
    remote_write_url: str | None = None
    alertmanager: bool = True
    alertmanager_bin: str | None = None
    alertmanager_host: str = "127.0.0.1"  # its API takes silences and alerts without auth: loopback only
    alertmanager_port: int = 9093
    tempo: bool = True
    tempo_bin: str | None = None
    tempo_host: str = "127.0.0.1"  # query API; Grafana and the UI reach it locally
    tempo_port: int = 3200
    otlp_host: str = "127.0.0.1"  # OTLP accepts writes without auth: loopback unless asked otherwise
    otlp_grpc_port: int = 4317
    otlp_http_port: int = 4318
    tempo_grpc_port: int = 9095
    tempo_memberlist_port: int = 7946
    tempo_retention: str = "720h"
    grafana: bool = True
    grafana_bin: str | None = None
    grafana_host: str = "0.0.0.0"  # behind its login (generated admin password)
    grafana_port: int = 3000

    @property
    def logs(self) -> Path:
        return self.log_dir or self.home.logs_dir

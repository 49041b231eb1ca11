"""Run the stack: the ingest server and Prometheus, each in its own process group.

Explicit process states (`starting`, `running`, `backoff`, `fatal`, `stopped`); "running" means
the readiness endpoint answered (`/healthz`, `/-/ready`), not that a pid exists. A child that
dies is restarted with exponential backoff; one that dies 5 times within a minute stops the
stack. The state file (`<home>/run/stack.json`) is written atomically and read by
`server status` / `server stop`.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Literal

from .._version import __version__
from ..child import python_command, python_env
from ..errors import BinaryNotFoundError, PortInUseError, ServiceError
from ..fsutil import atomic_write
from ..server.config import reach_host
from ..server.http.net import detect_ip, free_port, port_is_free
from ..server.prometheus.user_rules import write_rule_file
from ..server.rooms.alerting.am_config import Grouping
from ..server.rooms.alerting.notifications import config_paths, relay_of
from ..server.rooms.alerting.notifications import write_config as write_alertmanager_config
from ..tls import verified
from . import process
from .alertmanager import AlertmanagerSettings, tool_beside
from .alertmanager import command as alertmanager_command
from .binaries import find_binary
from .grafana import GrafanaSettings, admin_password
from .grafana import command as grafana_command
from .grafana import write_config as write_grafana
from .prometheus import PrometheusSettings, command, duration_seconds, install_rules, render_config
from .settings import StackSettings
from .state import MissingRecord, ProcessRecord, ServiceRecord, StackState
from .tempo import TempoSettings
from .tempo import command as tempo_command
from .tempo import render as render_tempo

State = Literal["stopped", "starting", "running", "backoff", "fatal"]
RESTART_WINDOW_S = 60.0
MAX_RESTARTS_IN_WINDOW = 5


@dataclass
class Service:
    name: str
    argv: list[str]
    ready_url: str
    url: str
    port: int
    log: Path
    version: str
    env: dict[str, str] = field(default_factory=dict)
    proc: Any = None
    state: State = "stopped"
    restarts: deque = field(default_factory=lambda: deque(maxlen=MAX_RESTARTS_IN_WINDOW))

    @property
    def marker(self) -> str:
        return " ".join(self.argv)


@dataclass(frozen=True)
class Missing:
    name: str
    reason: str
    hint: str | None


probe_host = reach_host  # where local probes reach a server bound to a host


class Supervisor:
    def __init__(self, settings: StackSettings, report: Callable[[str], None] = lambda _: None) -> None:
        self.s = settings
        self.report = report
        self.services: list[Service] = []
        self.missing: list[Missing] = []
        self.ingest_port = settings.server.port
        self.intake_grpc_port = 0
        self.prometheus_port = settings.prometheus_port
        self._stopping = threading.Event()
        self.grafana_password_created = False
        self.moved_ports: list[str] = []
        self.user_rules_file: Path | None = None  # Prometheus is reloaded (SIGHUP) when it changes
        self._rules_mtime: int | None = None

    # ------------------------------------------------------------------ planning
    def _pick_port(self, host: str, port: int, what: str) -> int:
        if port_is_free(host, port):
            return port
        if not self.s.auto_port:
            raise PortInUseError(f"port {port} ({what}) on {host} is already in use",
                                 hint="stop what uses it, choose another port, or pass --auto-port")
        chosen = free_port(host if host not in ("0.0.0.0", "::") else "127.0.0.1")
        self.moved_ports.append(f"port {port} ({what}) was busy; using {chosen} instead (--auto-port)")
        self.report(self.moved_ports[-1])
        return chosen

    def _find(self, name: str, enabled: bool, explicit: str | None) -> Any:
        """The service's binary, or None (recorded as missing) when it is optional and not found."""
        if not enabled:
            return None
        try:
            return find_binary(name, self.s.home.install_dir, explicit)
        except BinaryNotFoundError as exc:
            if explicit:  # asked for explicitly: that is an error, not a degraded start
                raise
            self.missing.append(Missing(name, exc.message, exc.hint))
            return None

    @property
    def data_dir(self) -> Path:
        return (self.s.data_dir or self.s.home.data_dir).expanduser()

    def plan(self) -> None:
        """Resolve ports and binaries and render configs; raises before anything is spawned.

        Start order: Alertmanager, Prometheus (which sends it alerts), Tempo, Grafana, then the ingest server (which
        forwards spans to Tempo and posts its own alerts to Alertmanager)."""
        s, home, srv = self.s, self.s.home, self.s.server
        home.ensure()
        self.ingest_port = self._pick_port(srv.host, srv.port, "ingest server")
        self.intake_grpc_port = self._pick_port(srv.host, srv.otlp_intake_grpc_port, "OTLP/gRPC intake") \
            if srv.otlp_intake_grpc_port else 0
        prom_bin = self._find("prometheus", s.prometheus, s.prometheus_bin)
        am_bin = self._find("alertmanager", s.alertmanager, s.alertmanager_bin)
        tempo_bin = self._find("tempo", s.tempo and not srv.otlp_endpoint, s.tempo_bin)
        grafana_bin = self._find("grafana", s.grafana, s.grafana_bin)
        if prom_bin:
            self.prometheus_port = self._pick_port(s.prometheus_host, s.prometheus_port, "Prometheus")
        alertmanager = None
        if am_bin:
            am_port = self._pick_port(s.alertmanager_host, s.alertmanager_port, "Alertmanager")
            alertmanager = AlertmanagerSettings(
                host=s.alertmanager_host, port=am_port,
                data_dir=self.data_dir / "alertmanager", config_file=config_paths(self.data_dir)[1])
        ports = {}
        if tempo_bin:
            for key, host, port, what in (("http", s.tempo_host, s.tempo_port, "Tempo HTTP"),
                                          ("otlp_grpc", s.otlp_host, s.otlp_grpc_port, "Tempo OTLP gRPC"),
                                          ("otlp_http", s.otlp_host, s.otlp_http_port, "Tempo OTLP HTTP"),
                                          ("grpc", "127.0.0.1", s.tempo_grpc_port, "Tempo internal gRPC"),
                                          ("memberlist", "127.0.0.1", s.tempo_memberlist_port, "Tempo memberlist")):
                ports[key] = self._pick_port(host, port, what)
        if grafana_bin:
            ports["grafana"] = self._pick_port(s.grafana_host, s.grafana_port, "Grafana")

        prom_url = f"http://{probe_host(s.prometheus_host)}:{self.prometheus_port}" if prom_bin else None
        query_url = srv.prometheus_url or prom_url  # what the UI and Grafana read: --prometheus-url, else ours
        tempo = None
        if tempo_bin:
            tempo = TempoSettings(
                http_host=s.tempo_host,
                http_port=ports["http"],
                otlp_host=s.otlp_host,
                otlp_grpc_port=ports["otlp_grpc"],
                otlp_http_port=ports["otlp_http"],
                grpc_port=ports["grpc"],
                memberlist_port=ports["memberlist"],
                data_dir=self.data_dir / "tempo",
                config_file=home.runtime_dir / "tempo.yaml",
                retention=s.tempo_retention,
            )
        otlp_endpoint, otlp_protocol = srv.otlp_endpoint, srv.otlp_protocol
        if tempo is not None and not otlp_endpoint:
            host = probe_host(s.otlp_host)
            otlp_endpoint = (f"http://{host}:{tempo.otlp_http_port}" if otlp_protocol == "http/protobuf"
                             else f"http://{host}:{tempo.otlp_grpc_port}")
        grafana = None
        if grafana_bin:
            grafana = GrafanaSettings(
                http_host=s.grafana_host,
                http_port=ports["grafana"],
                data_dir=self.data_dir / "grafana",
                runtime_dir=home.runtime_dir,
                prometheus_url=query_url,
                tempo_url=tempo.url if tempo else None,
                scrape_interval=s.scrape_interval,
                extra_dashboard_dir=s.extra_dashboard_dir,
            )

        server_cfg = replace(srv, port=self.ingest_port, data_dir=str(self.data_dir), prometheus_url=query_url,
                             managed_prometheus_url=prom_url,
                             scrape_interval_s=duration_seconds(s.scrape_interval), otlp_endpoint=otlp_endpoint,
                             otlp_intake_grpc_port=self.intake_grpc_port, tempo_url=tempo.url if tempo else None,
                             grafana_url=grafana.url if grafana else None,
                             prometheus_config_file=str(home.runtime_dir / "prometheus.yml") if prom_bin else None,
                             alertmanager_url=alertmanager.url if alertmanager else None,
                             amtool=tool_beside(am_bin.path, "amtool") if am_bin else None,
                             promtool=tool_beside(prom_bin.path, "promtool") if prom_bin else None,
                             public_url=srv.public_url or self.public_url)
        cfg_path = home.runtime_dir / "server.json"
        atomic_write(cfg_path, server_cfg.to_json(), mode=0o600)  # holds the token

        if alertmanager is not None:
            alertmanager.data_dir.mkdir(parents=True, exist_ok=True)
            write_alertmanager_config(self.data_dir, Grouping(srv.alert_group_wait, srv.alert_group_interval,
                                                              srv.alert_repeat_interval),
                                      relay_of(self.data_dir, f"http://{probe_host(srv.host)}:{self.ingest_port}",
                                               srv.token))
            self.services.append(Service(
                name="alertmanager", argv=alertmanager_command(am_bin.path, alertmanager),
                ready_url=alertmanager.url + "/-/ready", url=alertmanager.url, port=alertmanager.port,
                log=s.logs / "alertmanager.log", version=am_bin.version_str))
        if prom_bin is not None:
            prom = PrometheusSettings(
                host=s.prometheus_host, port=self.prometheus_port, data_dir=self.data_dir / "prometheus",
                config_file=home.runtime_dir / "prometheus.yml", targets_file=server_cfg.targets_file,
                ingest_target=f"{probe_host(srv.host)}:{self.ingest_port}", scrape_interval=s.scrape_interval,
                retention=s.retention, rules_dir=home.runtime_dir / "rules", remote_write_url=s.remote_write_url,
                alertmanager_target=alertmanager.target if alertmanager else None,
                user_rules_file=write_rule_file(self.data_dir), metrics_token_file=self._metrics_token_file(home),
                external_url=self._reached_at(s.prometheus_host, self.prometheus_port))
            self.user_rules_file = prom.user_rules_file
            install_rules(prom.rules_dir)  # type: ignore[arg-type]  # rules_dir is set for a managed Prometheus
            prom.data_dir.mkdir(parents=True, exist_ok=True)
            server_cfg.targets_file.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(prom.config_file, render_config(prom))
            self.services.append(Service(
                name="prometheus", argv=command(prom_bin.path, prom), ready_url=prom_url + "/-/ready",  # type: ignore[operator]  # prom_url is set when prom_bin is
                url=prom_url, port=self.prometheus_port, log=s.logs / "prometheus.log",  # type: ignore[arg-type]  # prom_url is set when prom_bin is
                version=prom_bin.version_str))
        if tempo is not None:
            (tempo.data_dir / "wal").mkdir(parents=True, exist_ok=True)
            (tempo.data_dir / "traces").mkdir(parents=True, exist_ok=True)
            atomic_write(tempo.config_file, render_tempo(tempo))
            self.services.append(Service(
                name="tempo", argv=tempo_command(tempo_bin.path, tempo), ready_url=tempo.url + "/ready", url=tempo.url,
                port=tempo.http_port, log=s.logs / "tempo.log", version=tempo_bin.version_str))
        if grafana is not None:
            write_grafana(grafana)
            password, created = admin_password(home.root)
            self.grafana_password_created = created
            self.services.append(Service(
                name="grafana", argv=grafana_command(grafana_bin.path, grafana), ready_url=grafana.url + "/api/health",
                url=grafana.url, port=grafana.http_port, log=s.logs / "grafana.log", version=grafana_bin.version_str,
                env={"GF_SECURITY_ADMIN_PASSWORD": password, "GF_SECURITY_ADMIN_USER": "admin"}))
        ingest_probe = f"http://{probe_host(s.server.host)}:{self.ingest_port}"
        self.services.append(Service(
            name="ingest", argv=python_command("rl_insight.server", "--config", str(cfg_path)),
            ready_url=ingest_probe + "/healthz", url=ingest_probe, port=self.ingest_port,
            log=s.logs / "rl-insight-server.log", version=__version__,
            env={k: v for k, v in python_env().items() if k.startswith("PYTHON")}))  # (this code: child.py)

    # ------------------------------------------------------------------ lifecycle
    def _metrics_token_file(self, home: Any) -> Path | None:
        """The token /metrics needs, in a file only this user reads, for the managed Prometheus' scrape (None: open)."""
        if not self.s.server.metrics_token:
            return None
        path = Path(home.runtime_dir) / "metrics_token"
        atomic_write(path, self.s.server.metrics_token + "\n", mode=0o600)
        return path

    def _spawn(self, svc: Service) -> None:
        svc.state = "starting"
        svc.proc = process.spawn(svc.argv, svc.log, env={**os.environ, "PYTHONUNBUFFERED": "1", **svc.env})
        if not process.wait_ready(svc.ready_url, self.s.ready_timeout, svc.proc):
            code = svc.proc.poll()
            why = f"exited with code {code}" if code is not None else f"not ready after {self.s.ready_timeout:.0f}s"
            raise ServiceError(f"{svc.name} {why} ({svc.ready_url}); last log lines of {svc.log}:\n{_tail(svc.log)}")
        svc.state = "running"

    def start(self) -> None:
        """Spawn every planned service and wait for each to be ready; all or nothing."""
        try:
            for svc in self.services:
                self.report(f"starting {svc.name} …")
                self._spawn(svc)
        except BaseException:
            self.stop()
            raise
        self.write_state(ready=True)

    def _reload_rules_if_changed(self) -> None:
        """Prometheus reads its rule files again (SIGHUP: it keeps the last good ones when a file is bad) when the
        server changed the user rules; the server never signals Prometheus itself."""
        if self.user_rules_file is None:
            return
        try:
            mtime = self.user_rules_file.stat().st_mtime_ns
        except OSError:
            return
        if self._rules_mtime is not None and mtime != self._rules_mtime:
            prom = next((svc for svc in self.services if svc.name == "prometheus"), None)
            if prom is not None and prom.proc is not None and prom.proc.poll() is None:
                prom.proc.send_signal(signal.SIGHUP)
                self.report("user alert rules changed: Prometheus reloaded them")
        self._rules_mtime = mtime

    def watch(self) -> int:
        """Supervise until `request_stop()`; returns the exit code for the CLI."""
        last_rotation = time.monotonic()
        while not self._stopping.wait(0.5):
            self._reload_rules_if_changed()
            if time.monotonic() - last_rotation > 30:
                last_rotation = time.monotonic()
                for svc in self.services:
                    if process.rotate_if_large(svc.log):
                        self.report(f"rotated {svc.log} (over 50 MiB; previous part in {svc.log.name}.1)")
            for svc in self.services:
                if svc.proc is None or svc.proc.poll() is None:
                    continue
                code = svc.proc.returncode
                now = time.monotonic()
                svc.restarts.append(now)
                if len(svc.restarts) == MAX_RESTARTS_IN_WINDOW and now - svc.restarts[0] < RESTART_WINDOW_S:
                    svc.state = "fatal"
                    self.report(f"{svc.name} exited with code {code} {MAX_RESTARTS_IN_WINDOW} times within "
                                f"{RESTART_WINDOW_S:.0f}s; stopping the stack. See {svc.log}")
                    self.stop()
                    return 1
                delay = min(30.0, 2 ** (len(svc.restarts) - 1))
                svc.state = "backoff"
                self.report(f"{svc.name} exited with code {code}; restarting in {delay:.0f}s")
                if self._stopping.wait(delay):
                    break
                try:
                    self._spawn(svc)
                    self.write_state(ready=True)
                    self.report(f"{svc.name} restarted (pid {svc.proc.pid})")
                except ServiceError as exc:
                    self.report(str(exc))
        self.stop()
        return 0

    def request_stop(self) -> None:
        self._stopping.set()

    def stop(self) -> None:
        for svc in reversed(self.services):
            if svc.proc is not None and svc.proc.poll() is None:
                result = process.terminate(svc.proc.pid, svc.marker)
                svc.proc.wait(timeout=5) if svc.proc.poll() is None else None
                self.report(f"{svc.name}: {result}")
            svc.state = "stopped"
        try:
            self.s.home.state_file.unlink()
        except FileNotFoundError:
            pass

    @property
    def public_url(self) -> str:
        """Where people reach the ingest server (what `server start` prints; the links in notifications)."""
        return self._reached_at(self.s.server.host, self.ingest_port)

    @staticmethod
    def _reached_at(host: str, port: int) -> str:
        """Where people reach a service bound to `host`: this machine's address on a wildcard bind, else the bound
        address itself (loopback stays loopback)."""
        ip = detect_ip()
        public_host = ip if host in ("0.0.0.0", "::") and ip else probe_host(host)
        return f"http://{public_host}:{port}"

    # ------------------------------------------------------------------ state file
    def write_state(self, ready: bool) -> None:
        StackState(
            version=__version__,
            supervisor=ProcessRecord(os.getpid(), process.cmdline(os.getpid()) or ""),
            ready=ready,
            started_at=time.time(),
            home=str(self.s.home.root),
            ingest_url=f"http://{probe_host(self.s.server.host)}:{self.ingest_port}",
            public_url=self.s.server.public_url or self.public_url,
            token_required=bool(self.s.server.token),
            services=tuple(
                ServiceRecord(
                    svc.name,
                    svc.proc.pid if svc.proc else None,
                    svc.marker,
                    svc.url,
                    svc.ready_url,
                    svc.port,
                    str(svc.log),
                    svc.version,
                    svc.state,
                )
                for svc in self.services
            ),
            missing=tuple(MissingRecord(m.name, m.reason, m.hint) for m in self.missing),
            grafana_password_new=self.grafana_password_created,
            moved_ports=tuple(self.moved_ports),
        ).write(self.s.home)


def service_status(svc: ServiceRecord) -> dict[str, Any]:
    """Live view of one recorded service: pid ours and alive, readiness answered."""
    import httpx  # lazily: the CLI imports this module for every command

    alive = svc.alive()
    ready = False
    if alive:
        try:
            ready = httpx.get(svc.ready_url, timeout=2.0, trust_env=False, verify=verified()).status_code == 200
        except httpx.HTTPError:
            ready = False
    return {**asdict(svc), "alive": alive, "ready": ready}


def _tail(path: Path, lines: int = 20) -> str:
    try:
        data = path.read_bytes()[-8192:].decode(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(data[-lines:])

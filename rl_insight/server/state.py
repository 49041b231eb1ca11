"""AppState: the kernel that builds everything a running ingest server holds, once, from its frozen config.

Routers receive the state and read what they need from it; nothing is created inside a route. Each part is made by
its own module (its factory names what it needs); here they are only joined, in dependency order, and every part
that runs or holds something is added to one Lifecycle where it is made: started in that order, stopped in the
reverse order (server/workers/lifecycle.py). Invariant: no feature logic and no deferred import lives here.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from ..fsutil import private_dir
from ..protocol import SpanRecord
from .access.sso import proxy_sign_on
from .config import ServerConfig
from .control.run_control import RunControlBuilder
from .fleet.assembly import build_fleet, processes_elsewhere
from .fleet.sharing import audit_log, shared_targets, token_book
from .http.net import public_url
from .http.slow_peers import PeerGuardCounters
from .intake.ingest import StoredWaiters
from .intake.otlp_grpc import GrpcTraceIntake
from .intake.otlp_metrics import OtlpMetrics
from .intake.pipeline import IntakePipeline
from .live.clients import ClientTracker, LiveProcess
from .live.collectors import register_collectors
from .live.inherited_states import inherit_open_states
from .live.insights.service import InsightService
from .live.metric_store import MetricStore, StoreCollector
from .live.run_conditions import RunConditions
from .live.server_metrics import ServerMetrics
from .live.spans import MemorySpanSink, OtlpSpanSink, RunStoreSpanSink, SpanFanout
from .live.step_clock import StepClock, stored_steps
from .outbound.otlp import OtlpForwarder, endpoint_from_env
from .prometheus.experiments import ExperimentBook
from .prometheus.probe import ServiceProbe
from .prometheus.targets import TargetRegistry
from .prometheus.user_rules import UserRules
from .runstore.backend import Backend, open_backend
from .runstore.reader import RunStoreReader
from .runstore.run_projects import RunProjects
from .runstore.writers import open_writer
from .security import Auth, local_names
from .workers.lifecycle import Lifecycle

log = logging.getLogger("rl_insight.server")


class AppState:
    def __init__(self, config: ServerConfig) -> None:  # (one part after another, in dependency order)
        self.config = cfg = config
        # the data dir holds the run store, profiles and stacks: this user's only, when the server makes it (first,
        # before any part makes a folder in it with the umask's mode); a folder that exists keeps its mode
        try:
            private_dir(Path(cfg.data_dir).expanduser())
        except OSError:  # not a folder, not writable: the run store's opening says so by name
            pass
        self.life = life = Lifecycle()
        self.boot_id = uuid.uuid4().hex
        self.auth = Auth(cfg.token, proxy=proxy_sign_on(cfg.trusted_proxy, cfg.token, cfg.user_header,
                                                        cfg.groups_header, cfg.access_map))
        self.host_names = local_names(cfg.host, cfg.allowed_hosts)
        self.registry = CollectorRegistry(auto_describe=False)
        self.store = MetricStore(cfg.series_ttl_s, cfg.max_series_per_metric, max_families=cfg.max_families,
                                 ttl_by_prefix={"agent_loop_": cfg.agent_loop_series_ttl_s},
                                 max_families_per_client=cfg.max_families_per_client,
                                 max_bytes=cfg.max_metric_store_bytes)
        self.registry.register(StoreCollector(self.store))
        self.peer_guard = PeerGuardCounters()  # filled by the HTTP protocol (__main__), read by /metrics
        self.metrics = ServerMetrics(self.registry, self.peer_guard)
        self.targets = TargetRegistry(cfg.targets_file, cfg.max_targets)

        # the run store's engine, chosen once from the location; the writer, the readers and the fleet share it
        self.backend: Backend | None = open_backend(cfg.store_location) if cfg.store_enabled else None
        backend = self.backend
        self.writer = (open_writer(cfg.store_writer, backend, cfg.store_retention_days, cfg.store_max_bytes,
                                   cfg.step_metric)
                       if backend is not None else None)
        life.add("run store writer", stop=self.writer.close if self.writer is not None else None)
        self.reader = RunStoreReader(backend) if backend is not None else None
        self.runs = RunProjects(self.reader)
        self.tokens, token_poll = token_book(backend)  # named tokens live in the run store: every server agrees
        self.auth.book, self.auth.run_project = self.tokens, self.runs.project
        if token_poll is not None:
            life.add("token poll", token_poll.start, token_poll.stop)
        self.audit, audit_prune = audit_log(backend, cfg.store_retention_days)
        if self.audit is not None and audit_prune is not None:
            life.add("audit log", audit_prune.start, _both(audit_prune.stop, self.audit.close))
        # scrape targets and experiments: files next to file_sd; on a PostgreSQL store shared by the whole fleet
        self.experiments = ExperimentBook(self.targets, shared=shared_targets(backend))

        self.step_clock = StepClock()  # each run's step clock: profile requests ("next"), OTLP spans without a step
        if self.reader is not None:  # a run first heard after a restart (or by another server): from its stored steps
            self.step_clock.seed = stored_steps(self.reader, cfg.step_metric)
        self.forwarder = (OtlpForwarder(cfg.otlp_endpoint, cfg.otlp_protocol, max_queue=cfg.otlp_queue)
                          if cfg.otlp_endpoint or endpoint_from_env() else None)
        life.add("OTLP forwarder", stop=self.forwarder.shutdown if self.forwarder is not None else None)
        self.memory_spans = MemorySpanSink(max_bytes=cfg.max_span_memory_bytes)
        self.spans = SpanFanout([self.memory_spans]
                                + ([RunStoreSpanSink(self.writer)] if self.writer is not None else [])
                                + ([OtlpSpanSink(self.forwarder)] if self.forwarder is not None else []))
        self.insight = (InsightService(self.reader, window_s=cfg.insights_window_s, live_window_s=cfg.live_window_s,
                                       step_metric=cfg.step_metric, version_metric=cfg.version_metric,
                                       writer=self.writer, interval_s=cfg.insights_interval_s,
                                       stalled_min_s=cfg.stalled_lane_min_s, worker=cfg.insights_worker)
                        if self.reader is not None else None)
        if self.insight is not None:
            life.add("insights", self.insight.start, self.insight.stop)
        reader = self.reader
        if reader is not None and not (backend is not None and backend.shared):  # (a fleet's lease holder tidies)
            life.add("open states of the last boot", lambda: inherit_open_states(reader, self.clients,
                                                                                  cfg.client_silence_s))

        self.clients = ClientTracker(cfg.client_silence_s, self._close_cut_short, self.mark_finished)
        # stalled and hung runs (the status "live" hides), from each insight refresh
        self.conditions = RunConditions(self.step_clock, cfg.stall_step_s)
        self.fleet = build_fleet(backend, self.writer, self.reader, self.boot_id, clients=self.clients,
                                 metric_store=self.store, conditions=self.conditions, insight=self.insight,
                                 refresh_targets=self.experiments.refresh,
                                 close_spans=self._close_cut_short, mark_finished=self.mark_finished,
                                 silence_s=cfg.client_silence_s)
        if self.fleet is not None:
            life.add("fleet", self.fleet.start, self.fleet.stop)
        life.add("client tracker", self.clients.start, self.clients.stop)
        if self.writer is not None:  # a run removed by retention takes its clock with it (and each room its records)
            for forget in (self.step_clock.forget, self.runs.forget):
                self.writer.on_runs_deleted.append(forget)
            self.step_clock.on_first_move.append(self.writer.put_step_backfill)
        # every ingest reply's RunControl: the run's open requests of every kind (each room adds its kind's book)
        # and its step clock
        self.control = RunControlBuilder(self.step_clock)
        if self.insight is not None:
            self.insight.on_refresh.append(self.conditions.on_insights)
        # each room's parts (server/rooms/: alerting, profiles, stacks), by room name, made by the app (house.furnish)
        self.rooms: dict[str, Any] = {}
        # alert rules users add, evaluated by the managed Prometheus (prometheus/user_rules.py)
        self.user_rules = UserRules(Path(cfg.data_dir).expanduser(), cfg.promtool,
                                    enabled=cfg.managed_prometheus_url is not None)
        self.prometheus = ServiceProbe(cfg.managed_prometheus_url or cfg.prometheus_url, "/-/ready")
        self.alertmanager = ServiceProbe(cfg.alertmanager_url, "/-/ready")
        self.tempo = ServiceProbe(cfg.tempo_url, "/ready")
        self.grafana = ServiceProbe(cfg.grafana_url, "/api/health")

        # every intake (JSON ingest, OTLP over HTTP and gRPC) hands its records to this one fan-out
        self.intake = IntakePipeline(store=self.store, writer=self.writer, spans=self.spans, clients=self.clients,
                                     clock=self.step_clock, metrics=self.metrics)
        self.otlp_metrics = OtlpMetrics(cfg.step_metric, self.step_clock)  # OTLP delta points' running totals
        # requests waiting for the run store's commit, woken once per commit; how long each waited is on /metrics
        self.acks = StoredWaiters(self.writer, self.metrics.ack_wait.observe)
        self.grpc_intake = (GrpcTraceIntake(self.intake, self.auth, cfg.host, cfg.otlp_intake_grpc_port,
                                            max_body_bytes=cfg.max_body_bytes, ack_timeout_s=cfg.ack_timeout_s,
                                            metrics=self.otlp_metrics)
                            if cfg.otlp_intake_grpc_port else None)
        if self.grpc_intake is not None:
            life.add("OTLP/gRPC intake", self.grpc_intake.start, self.grpc_intake.stop)
        register_collectors(self.registry, self.forwarder, self.writer)

    def start(self) -> None:
        self.life.start()

    def stop(self) -> None:
        self.life.stop()

    @property
    def public_url(self) -> str:
        """Where people reach this server (--public-url, else this host's address and port)."""
        return public_url(self.config.public_url, self.config.host, self.config.port)

    def run_processes(self, project: str, experiment_name: str) -> list[LiveProcess]:
        """A run's live processes: this server's, and in a fleet those reporting to the other servers."""
        return processes_elsewhere(getattr(self, "fleet", None), self.clients.processes(project, experiment_name),
                                   project, experiment_name, time.time() - self.config.client_silence_s, log)

    def mark_finished(self, project: str, experiment_name: str, lost: dict[str, Any] | None = None) -> None:
        if self.writer is not None:
            self.writer.mark_finished(project, experiment_name, lost)

    def _close_cut_short(self, spans: list[SpanRecord]) -> None:
        self.spans.put([], spans, "")


def _both(first: Any, second: Any) -> Any:
    return lambda: (first(), second())

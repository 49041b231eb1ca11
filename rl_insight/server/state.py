"""AppState: everything a running ingest server holds, built once from its frozen config.

Routers receive the state and read what they need from it; nothing is created inside a route.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from typing import Any, cast

from prometheus_client import CollectorRegistry

from ..errors import ConfigError
from ..fsutil import private_dir
from ..protocol import SpanRecord
from .config import ServerConfig, reach_host
from .control.run_control import RunControlBuilder
from .control.stacks.stall_watch import StallWatch
from .http.slow_peers import PeerGuardCounters
from .intake.pipeline import IntakePipeline
from .live.alert_events import AlertEvents
from .live.clients import ClientTracker, LiveProcess
from .live.insights.service import InsightService
from .live.metric_store import MetricStore, StoreCollector
from .live.run_conditions import RunConditions
from .live.server_metrics import ServerMetrics
from .live.spans import MemorySpanSink, OtlpSpanSink, RunStoreSpanSink, SpanFanout
from .outbound.alerting.am_config import Grouping
from .outbound.alerting.delivery import WebhookDelivery
from .outbound.alerting.notifications import Notifications, relay_of
from .outbound.otlp import OtlpForwarder, endpoint_from_env
from .prometheus.answers import Experiment
from .prometheus.experiments import ExperimentBook
from .prometheus.probe import ServiceProbe
from .prometheus.targets import TargetRegistry
from .prometheus.user_rules import UserRules
from .runstore.backend import Backend, open_backend
from .runstore.hand_over import HandOver
from .runstore.reader import RunStoreReader
from .runstore.writer import RunStoreWriter
from .runstore.writer_process import WriterProcess
from .security import Auth, local_names

log = logging.getLogger("rl_insight.server")


class AppState:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        # the data dir holds the run store, profiles and stacks: this user's only, when the server makes it (first,
        # before any part makes a folder in it with the umask's mode); a folder that exists keeps its mode
        try:
            private_dir(Path(config.data_dir).expanduser())
        except OSError:  # not a folder, not writable: the run store's opening says so by name
            pass
        self.boot_id = uuid.uuid4().hex
        self.auth = Auth(config.token, proxy=self._proxy_sign_on())
        self.host_names = local_names(config.host, config.allowed_hosts)
        self.registry = CollectorRegistry(auto_describe=False)
        self.store = MetricStore(
            config.series_ttl_s,
            config.max_series_per_metric,
            max_families=config.max_families,
            ttl_by_prefix={"agent_loop_": config.agent_loop_series_ttl_s},
            max_families_per_client=config.max_families_per_client,
            max_bytes=config.max_metric_store_bytes,
        )
        self.registry.register(StoreCollector(self.store))
        self.peer_guard = PeerGuardCounters()  # filled by the HTTP protocol (__main__), read by /metrics
        self.metrics = ServerMetrics(self.registry, self.peer_guard)
        self.targets = TargetRegistry(config.targets_file, config.max_targets)
        # the run store's engine, chosen once from the location; the writer, the readers and the fleet share it
        self.backend: Backend | None = open_backend(config.store_location) if config.store_enabled else None
        self.writer = self._writer(config, self.backend) if self.backend is not None else None
        self.reader = RunStoreReader(self.backend) if self.backend is not None else None
        # named tokens live in the run store, so every server on it agrees (server/access/tokens.py)
        self.tokens = self._token_book()
        self.auth.book = self.tokens
        self.auth.run_project = self._run_project
        self._projects_of_runs: dict[int, str] = {}  # (a run never changes project; bounded below)
        self.audit = self._audit_log()
        # scrape targets and experiments: files next to file_sd; on a PostgreSQL store shared by the whole fleet
        self.experiments = ExperimentBook(self.targets, shared=self._shared_targets())
        self.insight = (
            InsightService(
                self.reader,
                window_s=config.insights_window_s,
                live_window_s=config.live_window_s,
                step_metric=config.step_metric,
                version_metric=config.version_metric,
                writer=self.writer,
                interval_s=config.insights_interval_s,
                stalled_min_s=config.stalled_lane_min_s,
                worker=config.insights_worker,
            )
            if self.reader is not None
            else None
        )
        self.grpc_intake: Any = None  # OTLP/gRPC trace intake (server/intake/otlp_grpc.py), started with the server
        self.forwarder = (OtlpForwarder(config.otlp_endpoint, config.otlp_protocol, max_queue=config.otlp_queue)
                          if config.otlp_endpoint or endpoint_from_env() else None)
        self.memory_spans = MemorySpanSink(max_bytes=config.max_span_memory_bytes)
        sinks: list[Any] = [self.memory_spans]
        if self.writer is not None:
            sinks.append(RunStoreSpanSink(self.writer))
        if self.forwarder is not None:
            sinks.append(OtlpSpanSink(self.forwarder))
        self.spans = SpanFanout(sinks)
        from .outbound.exporters import build_exporters  # (its writers' imports only when asked for)

        self.exporters = build_exporters(config)
        if self.insight is not None and self.exporters.all:
            self.insight.on_refresh.append(self.exporters.insights)
        from .control.profiles.book import ProfileBook
        from .live.step_clock import StepClock

        self.step_clock = StepClock()  # each run's step clock: profile requests ("next"), OTLP spans without a step
        self.profiles = ProfileBook(config.profiles_dir, clock=self.step_clock,
                                    analysis_timeout_s=config.profile_analysis_timeout_s,
                                    analysis_max_memory_bytes=config.profile_analysis_max_memory_bytes,
                                    run_exists=self._run_exists if self.reader is not None else None,
                                    shared=self._shared_book("profile"))
        if self.writer is not None:  # a run removed by retention takes its profile traces (and clock) with it
            self.writer.on_runs_deleted.append(lambda keys: self.profiles.forget_runs(drop=keys))
            self.writer.on_runs_deleted.append(self.step_clock.forget)
            # SQLite gives the newest run's id again once that run is deleted: what was remembered of it goes too
            self.writer.on_runs_deleted.append(lambda keys: self._projects_of_runs.clear())
            self.step_clock.on_first_move.append(self.writer.put_step_backfill)
        self.clients = ClientTracker(config.client_silence_s, self._close_cut_short, self._mark_finished)
        self.clients.on_silent.append(self.profiles.process_silent)  # a process killed mid-window: say so
        from .control.stacks.book import StackBook

        # stack snapshots of a run's live processes, asked on the same replies as profiles
        self.stacks = StackBook(Path(config.data_dir).expanduser() / "stacks", self.run_processes,
                                shared=self._shared_book("stack"), gone=self.clients.gone,
                                lanes_usual=lambda p, e: self.conditions.lanes_usual((p, e)))
        if self.writer is not None:
            self.writer.on_runs_deleted.append(lambda keys: self.stacks.forget_runs(drop=keys))
        # every ingest reply's RunControl: the run's open requests of every kind, and its step clock
        self.control = RunControlBuilder(self.step_clock, {"profile": self.profiles, "stacks": self.stacks})
        # stalled and hung runs (the status "live" hides), from each insight refresh
        self.conditions = RunConditions(self.step_clock, config.stall_step_s)
        if self.insight is not None:
            self.insight.on_refresh.append(self.conditions.on_insights)
        self.stall_watch: StallWatch | None = None
        if self.insight is not None and config.stall_snapshots:  # a stalled run's stacks, taken by the server
            self.stall_watch = StallWatch(self.stacks, self.step_clock, self.conditions,
                                          interval_s=config.stall_snapshot_interval_s, profiles=self.profiles,
                                          auto_profile=config.auto_profile_on_stall,
                                          confirm_after_s=config.stall_confirm_s)
            self.insight.on_refresh.append(self.stall_watch.on_insights)
        # every intake (JSON ingest, OTLP over HTTP and gRPC) hands its records to this one fan-out
        self.intake = IntakePipeline(store=self.store, writer=self.writer, spans=self.spans, clients=self.clients,
                                     clock=self.step_clock, exporters=self.exporters, metrics=self.metrics)
        from .intake.otlp_metrics import OtlpMetrics  # OTLP metrics: delta points' running totals live here

        self.otlp_metrics = OtlpMetrics(config.step_metric, self.step_clock)
        from .intake.ingest import StoredWaiters

        # requests waiting for the run store's commit, woken once per commit; how long each waited is on /metrics
        self.acks = StoredWaiters(self.writer, self.metrics.ack_wait.observe)
        self.fleet = self._fleet()  # several servers on one PostgreSQL store (None: SQLite, one server)
        self.notifications, self.alert_events = self._notifications()
        self.webhooks = WebhookDelivery(self.notifications.receiver)
        # alert rules users add, evaluated by the managed Prometheus (prometheus/user_rules.py)
        self.user_rules = UserRules(Path(config.data_dir).expanduser(), config.promtool,
                                    enabled=config.managed_prometheus_url is not None)
        self.prometheus = ServiceProbe(config.managed_prometheus_url or config.prometheus_url, "/-/ready")
        self.alertmanager = ServiceProbe(config.alertmanager_url, "/-/ready")
        self.tempo = ServiceProbe(config.tempo_url, "/ready")
        self.grafana = ServiceProbe(config.grafana_url, "/api/health")
        self._register_collectors()

    async def prometheus_convergence(self, row: Experiment, timeout_s: float = 15.0) -> dict[str, Any]:
        """After archive/restore: wait until Prometheus' active targets reflect the experiment's state
        (it re-reads the file_sd file within seconds), as upstream reports `prometheus_converged`."""
        import asyncio

        if self.prometheus.url is None:
            return {"prometheus_converged": None, "prometheus_message": "no Prometheus is managed by this server"}
        want_present = row["state"] == "active" and row["target_count"] > 0
        deadline = time.monotonic() + timeout_s
        silent_until = time.monotonic() + 2.0  # a Prometheus that answers nothing for 2 s is down, not converging
        while True:
            active = await self.prometheus.active_targets()
            if active is None and time.monotonic() > silent_until:
                return {"prometheus_converged": False,
                        "prometheus_message": f"Prometheus at {self.prometheus.url} does not answer: it applies the "
                                              "change when it is back (the file_sd file is written)"}
            if active is not None:
                silent_until = deadline
                mine = [t for t in active if t.get("project") == row["project"]
                        and t.get("experiment_name") == row["experiment_name"]]
                if bool(mine) == want_present:
                    return {"prometheus_converged": True}
            if time.monotonic() > deadline:
                return {
                    "prometheus_converged": False,
                    "prometheus_message": "Prometheus did not reflect the change within %.0f s (it re-reads file_sd "
                                          "files periodically)"
                    % timeout_s,
                }
            await asyncio.sleep(0.5)

    def _proxy_sign_on(self) -> Any:
        """People a trusted proxy signs in (server/access/sso.py), when `trusted_proxy` names its networks."""
        cfg = self.config
        if not cfg.trusted_proxy:
            return None
        if not cfg.token:
            raise ConfigError("--trusted-proxy needs the server to have a token: without one every request is "
                              "trusted and the proxy's header would mean nothing",
                              hint="start with --token (or let `rl-insight server start` generate one)")
        from .access.sso import ProxySignOn

        return ProxySignOn(cfg.trusted_proxy, cfg.user_header, cfg.groups_header, cfg.access_map)

    def _shared_targets(self) -> Any:
        """On a store a fleet shares (PostgreSQL), the scrape targets and experiments as one document the fleet
        shares."""
        if self.backend is None or not self.backend.shared:
            return None
        from .fleet.records import SharedDocument, SharedRecords

        return SharedDocument(SharedRecords(self.backend, "targets"), "fleet")

    def _shared_book(self, kind: str) -> Any:
        """On a store a fleet shares (PostgreSQL), profile requests and stack snapshots live in the store: every
        server of the fleet sees them (None: files under data_dir, one server)."""
        if self.backend is None or not self.backend.shared:
            return None
        from .control.profiles.shared import SharedRequests
        from .fleet.records import SharedRecords
        from .fleet.shared_book import SharedBook

        records = SharedRecords(self.backend, kind)
        if kind == "stack":
            return SharedBook(records, lambda s: s["id"], lambda s: (s["project"], s["experiment_name"]), ("reports",))
        if not self.config.shared_dir:
            log.warning("profile traces are kept under %s on this server only: with several servers on one store, "
                        "give them all one --shared-dir (docs/scale.md)", self.config.profiles_dir)
        return SharedRequests(records)

    def run_processes(self, project: str, experiment_name: str) -> list[LiveProcess]:
        """A run's live processes: this server's, and in a fleet those reporting to the other servers (a stack
        snapshot asks them all)."""
        local = self.clients.processes(project, experiment_name)
        if getattr(self, "fleet", None) is None:
            return local
        try:
            others = self.fleet.registry.processes_elsewhere(project, experiment_name,
                                                             time.time() - self.config.client_silence_s)
        except Exception as exc:  # the store is away: this server's processes still answer
            log.warning("cannot read the fleet's other processes of %s/%s: %s", project, experiment_name, exc)
            return local
        mine = {p["client_id"] for p in local}
        # (the other servers' are the same descriptions, stored by their trackers: fleet/registry.py)
        return local + [cast(LiveProcess, p) for p in others if p.get("client_id") not in mine]

    @staticmethod
    def _writer(config: ServerConfig, backend: Backend) -> HandOver:
        """The run store's writer, in a process of its own (the default) or in a thread of this one."""
        kinds = {"process": WriterProcess, "thread": RunStoreWriter}
        if config.store_writer not in kinds:
            raise ConfigError(f"store_writer {config.store_writer!r} is not one of {', '.join(kinds)}")
        return kinds[config.store_writer](backend, retention_days=config.store_retention_days,
                                          max_bytes=config.store_max_bytes)

    def _fleet(self) -> Any:
        """On a store a fleet shares (PostgreSQL), the fleet loop (server/fleet/): background work on the lease holder
        only, clients that move between servers counted once, a run's step clock seeded from the store."""
        if self.backend is None or self.writer is None or self.reader is None or not self.backend.shared:
            return None
        from .fleet.coordinator import FleetCoordinator
        from .fleet.lease import FleetLease
        from .fleet.registry import FleetRegistry
        from .runstore import queries as q
        from .runstore.steps.run_insights import metric_samples

        backend, reader, step_metric = self.backend, self.reader, self.config.step_metric
        lease = FleetLease(backend, self.boot_id)
        fleet = FleetCoordinator(FleetRegistry(backend, self.boot_id), lease, self.clients, self.store, reader,
                                 self._close_cut_short, self._mark_finished, self.config.client_silence_s)
        fleet.on_tick.append(self.experiments.refresh)  # another server's targets into this one's file_sd
        from .fleet.records import SharedDocument, SharedRecords

        conditions = SharedDocument(SharedRecords(backend, "conditions"), "fleet")  # the leader's stalled/hung runs
        fleet.on_tick.append(lambda: self.conditions.share(conditions, lease.held))
        self.store.own_clients()  # /metrics shows the processes this server owns (FleetCoordinator.tick)
        self.writer.lead = lambda: lease.held
        if self.insight is not None:
            self.insight.lead = lambda: lease.held

        def seed(project: str, experiment_name: str) -> list[tuple[float, float]]:
            run_id = q.find_run_id(reader.conn(), project, experiment_name)
            return [] if run_id is None else metric_samples(reader.conn(), run_id, step_metric)

        self.step_clock.seed = seed
        return fleet

    def _notifications(self) -> tuple[Notifications, AlertEvents | None]:
        """The receivers and Alertmanager (notifications off without one), and the server's own events posted to it
        (a stall, a hang verdict, a lost run) by the server that leads."""
        config = self.config
        grouping = Grouping(config.alert_group_wait, config.alert_group_interval, config.alert_repeat_interval)
        data_dir = Path(config.data_dir).expanduser()
        relay = relay_of(data_dir, f"http://{reach_host(config.host)}:{config.port}", config.token)
        notifications = Notifications(data_dir, config.alertmanager_url, grouping, amtool=config.amtool, relay=relay)
        if notifications.am is None or self.reader is None:
            return notifications, None
        insight = self.insight

        def verdict_of(project: str, experiment_name: str) -> Any:
            snap = self.stacks.latest_complete(project, experiment_name)
            return snap.get("verdict") if snap is not None else None

        events = AlertEvents(notifications.am, self.conditions, self.reader, self.step_clock,
                             public_url=lambda: self.public_url, live_window_s=config.live_window_s,
                             on_finish=config.alert_on_finish, verdict_of=verdict_of,
                             lead=lambda: insight.lead() if insight is not None else True,
                             restore_silences=notifications.restore_silences)
        return notifications, events

    @property
    def public_url(self) -> str:
        """Where people reach this server: --public-url, else this host's address and port (what `server start`
        prints)."""
        if self.config.public_url:
            return self.config.public_url
        from .http.net import detect_ip

        host = self.config.host
        if host in ("0.0.0.0", "::", ""):
            host = detect_ip() or "127.0.0.1"
        return f"http://{f'[{host}]' if ':' in host else host}:{self.config.port}"

    def _run_exists(self, project: str, experiment_name: str) -> bool:
        from .runstore import queries as q

        assert self.reader is not None
        return q.find_run_id(self.reader.conn(), project, experiment_name) is not None

    def _token_book(self) -> Any:
        if self.backend is None:
            return None
        from .access.tokens import KIND, REFRESH_S, TokenBook
        from .fleet.records import SharedRecords
        from .workers.batch_worker import Periodic

        book = TokenBook(SharedRecords(self.backend, KIND))
        book.refresh()
        self._token_poll = Periodic("tokens", REFRESH_S / 2, book.poll)  # (revocations seen within REFRESH_S)
        return book

    def _run_project(self, run_id: int) -> str | None:
        """The project of a run (None: no such run), remembered."""
        project = self._projects_of_runs.get(run_id)
        if project is None and self.reader is not None:
            from .runstore.queries import project_of

            project = project_of(self.reader.conn(), run_id)
            if project is None:
                return None
            if len(self._projects_of_runs) >= 100_000:
                self._projects_of_runs.clear()
            self._projects_of_runs[run_id] = project
        return project

    def _audit_log(self) -> Any:
        if self.backend is None:
            return None
        from .access.audit import KIND, AuditLog
        from .fleet.records import SharedRecords
        from .workers.batch_worker import Periodic

        log_ = AuditLog(SharedRecords(self.backend, KIND), self.config.store_retention_days)
        self._audit_prune = Periodic("audit-prune", 3600.0, log_.prune)  # retained like the runs
        return log_

    def _close_cut_short(self, spans: list[SpanRecord]) -> None:
        self.spans.put([], spans, "")

    def _mark_finished(self, project: str, experiment_name: str, lost: dict[str, Any] | None = None) -> None:
        if self.writer is not None:
            self.writer.mark_finished(project, experiment_name, lost)

    def _register_collectors(self) -> None:
        from .live.collectors import ExportCollector, OtlpCollector, RunStoreHealthCollector

        if self.exporters.all:
            self.registry.register(ExportCollector(self.exporters))
        if self.forwarder is not None:
            self.registry.register(OtlpCollector(self.forwarder))
        if self.writer is not None:
            self.registry.register(RunStoreHealthCollector(self.writer))
        # (not the insight families: /metrics appends their text as rendered, InsightService.exposition)

    def _inherit_open_states(self, limit: int = 100_000) -> None:
        """States the previous boot stored as open go to the client tracker (closed if nobody claims them)."""
        import json

        from .runstore import queries as q

        assert self.reader is not None
        found = []
        for project, experiment, last_seen, _finished, (sid, trace, parent, name, lane, start, attrs) in \
                q.open_states(self.reader.conn(), limit):
            try:
                a = json.loads(attrs)
            except ValueError:
                a = {}
            a = {**(a if isinstance(a, dict) else {}), "project": project, "experiment_name": experiment}
            found.append(
                (SpanRecord(sid, trace, parent, name, lane, "state", start, None, a, 256), int(last_seen * 1e9))
            )
        if found:
            self.clients.inherit(found)
            log.info("%d states were open when the server last stopped; closed as cut short in %.0f s unless their "
                     "processes announce them", len(found), self.config.client_silence_s)

    def start(self) -> None:
        if self.insight is not None:
            self.insight.start()
        if self.reader is not None and self.fleet is None:  # (a fleet's lease holder tidies instead)
            self._inherit_open_states()
        if self.fleet is not None:
            self.fleet.start()
        self.clients.start()
        self.stacks.start()
        if self.tokens is not None:
            self._token_poll.start()
        if self.audit is not None:
            self._audit_prune.start()
        if self.alert_events is not None:
            self.alert_events.start()
        if self.config.otlp_intake_grpc_port:
            from .intake.otlp_grpc import GrpcTraceIntake

            self.grpc_intake = GrpcTraceIntake(
                self.intake,
                self.auth,
                self.config.host,
                self.config.otlp_intake_grpc_port,
                max_body_bytes=self.config.max_body_bytes,
                ack_timeout_s=self.config.ack_timeout_s,
                metrics=self.otlp_metrics,
            )
            self.grpc_intake.start()

    def stop(self) -> None:
        if self.grpc_intake is not None:
            self.grpc_intake.stop()
        if self.tokens is not None:
            self._token_poll.stop()
        if self.audit is not None:
            self._audit_prune.stop()
            self.audit.close()
        self.clients.stop()
        if self.alert_events is not None:
            self.alert_events.stop()
        self.notifications.close()
        if self.fleet is not None:
            self.fleet.stop()
        self.stacks.stop()
        if self.insight is not None:
            self.insight.stop()
        if self.forwarder is not None:
            self.forwarder.shutdown()
        if self.exporters.all and self.reader is not None and self.writer is not None:
            try:
                self.writer.flush(10)
                self.exporters.final_insights(self.reader, self.config.step_metric, self.config.version_metric)
            except Exception as exc:  # shutdown goes on
                log.warning("final insight export failed: %s", exc)
        self.exporters.close()
        self.profiles.close()
        if self.writer is not None:
            self.writer.close()

"""The server's own metrics (`rl_insight_server_*`): what it accepted, refused and how long that took, in the app's
isolated registry (never the process-global one, so several servers can live in one test process)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from ..._version import __version__
from ..http.slow_peers import PeerGuardCounters


class ServerMetrics:
    """The server's own metrics (`rl_insight_server_*`), in the app's isolated registry."""

    def __init__(self, registry: CollectorRegistry, peer_guard: PeerGuardCounters | None = None) -> None:
        p = "rl_insight_server_"
        self.requests = Counter(
            p + "http_requests", "HTTP requests by route and status", ["route", "method", "status"], registry=registry
        )
        self.accepted = Counter(
            p + "ingest_items_accepted", "Ingested items stored, by section", ["section"], registry=registry
        )
        self.rejected = Counter(
            p + "ingest_items_rejected", "Ingested items refused, by reason", ["reason"], registry=registry
        )
        self.replaced = Counter(p + "ingest_strings_replaced", "Strings with undecodable characters replaced by U+FFFD",
                                registry=registry)
        self.latency = Histogram(
            p + "ingest_duration_seconds",
            "Time to decode, validate and store one ingest batch",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=registry,
        )
        self.ack_wait = Histogram(
            p + "ingest_ack_wait_seconds",
            "Time an ingest answer waited for the run store to commit its batch (answers are sent after the commit)",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=registry,
        )
        self.series = Gauge(p + "series", "Trainer series currently exposed", registry=registry)
        self.store_bytes = Gauge(
            p + "metric_store_bytes", "Estimated bytes of names and labels held for /metrics", registry=registry
        )
        self.open_states = Gauge(p + "open_states", "RL states that have started and not yet ended", registry=registry)
        self.targets = Gauge(p + "targets", "Registered scrape targets", registry=registry)
        self.clients = Gauge(
            p + "live_clients", "Client processes heard from within the silence timeout", registry=registry
        )
        self.cut_short = Gauge(p + "spans_cut_short", "Open states closed because their client went silent or finished",
                               registry=registry)
        self.otlp_intake = Counter(p + "otlp_intake", "OTLP trace intake: attribute values capped, spans without a run "
                                   "identity (kept under project 'unassigned')", ["what"], registry=registry)
        info = Gauge(p + "build_info", "Server version", ["version"], registry=registry)
        info.labels(__version__).set(1)
        registry.register(_PeerGuardCollector(peer_guard or PeerGuardCounters()))


class _PeerGuardCollector(Collector):
    """The slow-peer guard's counts (server/http/slow_peers.py), kept by the HTTP protocol as plain integers (it
    runs per connection, on the event loop: no prometheus_client lock there), read when /metrics is scraped."""

    def __init__(self, counters: PeerGuardCounters) -> None:
        self.counters = counters

    def collect(self) -> Iterator[CounterMetricFamily]:
        c = self.counters
        family = CounterMetricFamily("rl_insight_server_connections_closed", "Connections the server closed on a "
                                     "slow or surplus peer: headers or body not sent in time, past max_connections",
                                     labels=["why"])
        family.add_metric(["header_timeout"], c.header_timeouts)
        family.add_metric(["body_timeout"], c.body_timeouts)
        family.add_metric(["max_connections"], c.refused)
        yield family

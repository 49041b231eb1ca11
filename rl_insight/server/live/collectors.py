"""Health of the server's own pipelines on /metrics (collectors copy counters; they never block ingest)."""

from __future__ import annotations

from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

from ..outbound.otlp import OtlpForwarder
from ..runstore.hand_over import HandOver


class OtlpCollector:
    """Span forwarding health."""

    def __init__(self, forwarder: OtlpForwarder) -> None:
        self._f = forwarder

    def collect(self) -> Any:
        sent = CounterMetricFamily("rl_insight_server_otlp_spans_sent", "Spans accepted by the OTLP receiver (Tempo)")
        sent.add_metric([], self._f.sent)
        dropped = CounterMetricFamily(
            "rl_insight_server_otlp_spans_dropped", "Spans not forwarded, by reason", labels=["reason"]
        )
        for reason, n in dict(self._f.dropped).items():
            dropped.add_metric([reason], n)
        return [sent, dropped]


class RunStoreHealthCollector:
    """Run store health."""

    def __init__(self, writer: HandOver) -> None:
        self._w = writer

    def collect(self) -> Any:
        st = self._w.stats
        written = CounterMetricFamily(
            "rl_insight_server_store_items_written", "Items written to the run store", labels=["kind"]
        )
        written.add_metric(["samples"], st.samples)
        written.add_metric(["spans"], st.spans)
        dropped = CounterMetricFamily("rl_insight_server_store_items_dropped", "Items the run store could not take",
                                      labels=["reason"])
        for reason, n in dict(st.by_reason).items():
            dropped.add_metric([reason], n)
        queue = GaugeMetricFamily("rl_insight_server_store_queue_items", "Items waiting for the run store writer")
        queue.add_metric([], st.queue_items)
        degraded = GaugeMetricFamily("rl_insight_server_store_degraded", "1 while run store writes fail (e.g. disk "
                                                                         "full)")
        degraded.add_metric([], 1 if st.degraded_since else 0)
        retried = CounterMetricFamily("rl_insight_server_store_conflicts_retried", "Run store batches written again "
                                      "after a conflict with another server's transaction (a fleet on PostgreSQL)")
        retried.add_metric([], st.conflicts_retried)
        return [written, dropped, queue, degraded, retried]


class ExportCollector:
    """Live exporters (TensorBoard, W&B): points written and dropped by reason."""

    def __init__(self, exporters: Any) -> None:
        self._e = exporters

    def collect(self) -> Any:
        written = CounterMetricFamily("rl_insight_server_export_points_written", "Points written by live exporters",
                                      labels=["exporter"])
        dropped = CounterMetricFamily(
            "rl_insight_server_export_points_dropped",
            "Points live exporters could not write",
            labels=["exporter", "reason"],
        )
        for e in self._e.all:
            written.add_metric([e.name], e.written)
            for reason, n in dict(e.dropped).items():
                dropped.add_metric([e.name, reason], n)
        return [written, dropped]


def register_collectors(registry: Any, forwarder: OtlpForwarder | None, writer: HandOver | None) -> None:
    """The pipelines' health on /metrics: the OTLP forwarder, the run store's writer (the exports room registers its
    own ExportCollector; the insight families are not here: /metrics appends their text as rendered,
    InsightService.exposition)."""
    if forwarder is not None:
        registry.register(OtlpCollector(forwarder))
    if writer is not None:
        registry.register(RunStoreHealthCollector(writer))

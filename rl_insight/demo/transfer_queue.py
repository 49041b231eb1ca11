"""Stand-in TransferQueue controller exporter (`role="controller"`), with TQ's real names.

Note the `_total` *gauges* (`tq_partitions_total`, `tq_storage_capacity_total`, …): TransferQueue
exports them as gauges, so dashboards must not `rate()` them.
"""

from __future__ import annotations

import random
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .endpoint import MetricsEndpoint

# The controller's op_type values (TransferQueue controller.py); PUT_DATA/GET_DATA/CLEAR_DATA belong to the
# storage units' own exporters, which this stand-in folds into the same endpoint.
OP_TYPES = ("GET_META", "NOTIFY_DATA_UPDATE", "CLEAR_META", "GET_PARTITION_META", "SET_CUSTOM_META", "CLEAR_PARTITION",
            "GET_CONSUMPTION", "RESET_CONSUMPTION", "GET_PRODUCTION", "GET_LIST_PARTITIONS", "KV_RETRIEVE_META",
            "KV_RETRIEVE_KEYS", "KV_LIST")
SAMPLE_OPS = ("NOTIFY_DATA_UPDATE", "CLEAR_META")  # the only ops with a samples count
STORAGE_OPS = ("PUT_DATA", "GET_DATA", "CLEAR_DATA")


class TransferQueueStandIn:
    def __init__(self, storage_units: int = 2) -> None:
        r = self.registry = CollectorRegistry()
        self._started = time.time()
        self.uptime = Gauge("tq_controller_uptime_seconds", "Controller uptime", registry=r)
        self.rss = Gauge("tq_controller_memory_rss_bytes", "Controller RSS", registry=r)
        self.partitions = Gauge("tq_partitions_total", "Number of partitions (gauge)", registry=r)
        self.partition_samples = Gauge(
            "tq_partition_samples_total", "Samples per partition (gauge)", ["partition_id"], registry=r
        )
        self.production = Gauge(
            "tq_partition_production_progress", "Production progress 0-1", ["partition_id", "task_name"], registry=r
        )
        self.consumption = Gauge(
            "tq_partition_consumption_progress", "Consumption progress 0-1", ["partition_id", "task_name"], registry=r
        )
        self.index_allocated = Gauge("tq_global_index_allocated_total", "Allocated global indexes (gauge)", registry=r)
        self.index_reusable = Gauge("tq_global_index_reusable_total", "Reusable global indexes (gauge)", registry=r)
        self.requests = Counter("tq_controller_request", "Controller requests", ["op_type"], registry=r)
        self.errors = Counter("tq_controller_request_errors", "Controller request errors", ["op_type"], registry=r)
        self.samples = Counter(
            "tq_controller_request_samples", "Samples handled by controller requests", ["op_type"], registry=r
        )
        self.duration = Histogram(
            "tq_controller_request_duration_seconds",
            "Controller request latency",
            ["op_type"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=r,
        )
        su = ["storage_unit_id"]
        self.capacity = Gauge("tq_storage_capacity_total", "Storage capacity in samples (gauge)", su, registry=r)
        self.active_keys = Gauge("tq_storage_active_keys_total", "Active keys (gauge)", su, registry=r)
        self.utilization = Gauge("tq_storage_utilization_ratio", "Storage utilization", su, registry=r)
        self.storage_rss = Gauge("tq_storage_memory_rss_bytes", "Storage unit RSS", su, registry=r)
        # a gauge holding a cumulative count, as TransferQueue exports it (its own dashboard rate()s it)
        self.storage_ops = Gauge("tq_storage_request_ops", "Storage request count", su + ["op_type"], registry=r)
        self._ops_total: dict[tuple[str, str], float] = {}
        self.storage_p50 = Gauge(
            "tq_storage_request_latency_p50", "Storage request latency p50", su + ["op_type"], registry=r
        )
        self.storage_p99 = Gauge(
            "tq_storage_request_latency_p99", "Storage request latency p99", su + ["op_type"], registry=r
        )
        self._units = [str(i) for i in range(storage_units)]
        self._live = 0
        for u in self._units:
            self.capacity.labels(u).set(200_000)
        for op in OP_TYPES:  # expose every op_type from the start, like TQ does after its first collection
            self.requests.labels(op)
            self.errors.labels(op)
        for op in SAMPLE_OPS:
            self.samples.labels(op)
        self.endpoint = MetricsEndpoint(r)
        self.address = self.endpoint.address

    def step(self, step: int, batch: int) -> None:
        """One training step's traffic: produce `batch` samples, consume them, clear them."""
        self._requests(batch)
        partition = f"train_{step}"
        self._clear(f"train_{step - 2}")  # a partition is cleared (and its series removed) once both tasks consumed it
        self.partitions.set(2)
        self.partition_samples.labels(partition).set(batch)
        for task in ("actor_update", "compute_log_prob"):
            self.production.labels(partition, task).set(1.0)
            self.consumption.labels(partition, task).set(1.0)
        self._live = batch
        self.index_allocated.set(batch * 2)
        self.index_reusable.set(batch)
        self.uptime.set(time.time() - self._started)
        self.rss.set(850e6 + random.uniform(-5e6, 5e6))
        self._storage(batch)

    def _requests(self, batch: int) -> None:
        for op, n in (("NOTIFY_DATA_UPDATE", batch), ("GET_META", batch), ("GET_PRODUCTION", 4), ("GET_CONSUMPTION", 4),
                      ("CLEAR_META", batch), ("GET_PARTITION_META", 2)):
            calls = max(1, n // 64)
            self.requests.labels(op).inc(calls)
            if op in SAMPLE_OPS:
                self.samples.labels(op).inc(n)
            for _ in range(min(calls, 20)):
                self.duration.labels(op).observe(random.lognormvariate(-5.5, 0.6))

    def _clear(self, old: str) -> None:
        for gauge in (self.production, self.consumption):
            for task in ("actor_update", "compute_log_prob"):
                try:
                    gauge.remove(old, task)
                except KeyError:
                    pass
        try:
            self.partition_samples.remove(old)
        except KeyError:
            pass

    def _storage(self, batch: int) -> None:
        for u in self._units:
            keys = self._live // len(self._units)
            self.active_keys.labels(u).set(keys)
            self.utilization.labels(u).set(keys / 200_000)
            self.storage_rss.labels(u).set(2.1e9 + keys * 1e4)
            for op in STORAGE_OPS:
                total = self._ops_total[(u, op)] = self._ops_total.get((u, op), 0.0) + batch / 2
                self.storage_ops.labels(u, op).set(total)
                self.storage_p50.labels(u, op).set(0.002)
                self.storage_p99.labels(u, op).set(0.02)

    def close(self) -> None:
        self.endpoint.close()

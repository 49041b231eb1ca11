"""One intake pipeline: every decoded record goes from here to each place that takes it, for our JSON ingest
and both OTLP intakes alike.

The places: the live metric store (`/metrics`), the run store, the span sinks (memory view, run store, Tempo), the
client tracker (liveness, open states), the run's step clock, whatever a room adds (`on_samples`: the live
exporters), and the server's own counters. Routes decode, call one method, and answer; nothing else wires sinks
together.

Invariant: what a caller acknowledges is in the run store. Each method returns the `Receipt` of what it handed
the run store (None when there is nothing to store, or no store), and the caller answers only once the store
says all of it is committed (intake/ingest.StoredWaiters on the loop, wait_stored on a thread).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from ...protocol import Batch
from ...redact import redact_flat
from ..live.clients import ClientTracker
from ..live.metric_store import MetricStore
from ..live.server_metrics import ServerMetrics
from ..live.spans import SpanFanout
from ..live.step_clock import StepClock
from ..runstore.hand_over import HandOver, Receipt
from ..runstore.rows import SampleRow
from .ingest import IngestResult, apply_batch
from .otlp import MAX_SPANS_PER_REQUEST, SpanPairs, to_batches


@dataclass
class Ingested:
    """What one JSON batch came to: the batch, the per-item result, and what it handed the run store."""

    batch: Batch
    result: IngestResult
    receipt: Receipt | None


@dataclass
class SpansReceived:
    """What one OTLP request came to: spans accepted and refused, the first refusal's reason, what it handed the run
    store."""

    accepted: int
    rejected: int
    error: str
    receipt: Receipt | None


# a run whose processes only beat (a hang holds every rank in one state, and nothing is logged) is told to the run store
# at most this often, so it stays live there; a data batch says so by itself
HEARD_EVERY_S = 5.0
MAX_HEARD_RUNS = 10_000


class IntakePipeline:
    def __init__(self, *, store: MetricStore, writer: HandOver | None, spans: SpanFanout, clients: ClientTracker,
                 clock: StepClock, metrics: ServerMetrics) -> None:
        self.store, self.writer, self.spans, self.clients = store, writer, spans, clients
        self.clock, self.metrics = clock, metrics
        # each batch's samples, for whoever sends them on (the exports room: TensorBoard, W&B); never raises into ingest
        self.on_samples: list[Callable[[list[SampleRow]], None]] = []
        self._heard_at: dict[tuple[str, str], float] = {}  # run -> when a heartbeat of it was last handed over

    def batch(self, obj: Any, projects: frozenset[str] | None = None) -> Ingested:
        """A decoded ingest body (protocol form): validated item by item, then to every sink. `projects`: the only
        projects its sender may write (None: any)."""
        started = time.perf_counter()
        batch, result = apply_batch(obj, self.store, projects)
        since = self.writer.seq() if self.writer is not None else None
        run_info = False
        c = batch.client
        if self.writer is not None:
            self.writer.put_samples(result.samples)
            if c.run_config is not None and c.project and c.experiment_name:
                config, _ = redact_flat(c.run_config)  # again here: a client of another version may not have
                self.writer.put_run_info(c.project, c.experiment_name, config, c.run_tags or [])
                run_info = True
        for send in self.on_samples:
            send(result.samples)
        self.spans.put(result.span_starts, result.spans, c.host, c.namespace)
        stepped = [(r.step, r.ts) for r in result.samples if r.step is not None]
        self.clients.seen(c, result.span_starts, result.spans, batch.final, logs_steps=bool(stepped))
        self._count(result.accepted_by_section, result.reasons)
        if result.replaced_strings:
            self.metrics.replaced.inc(result.replaced_strings)
        self.clock.note_steps(c.project, c.experiment_name, stepped)
        self.metrics.latency.observe(time.perf_counter() - started)
        stores = result.samples or result.spans or result.span_starts or run_info or batch.final
        if not stores and c.project and c.experiment_name:
            self._heard(c.project, c.experiment_name)
        return Ingested(batch, result, self._receipt(since) if stores else None)

    def _heard(self, project: str, experiment_name: str) -> None:
        """A heartbeat: the run store hears of the run at most every HEARD_EVERY_S (not waited for: nothing to ack)."""
        if self.writer is None:
            return
        now, run = time.monotonic(), (project, experiment_name)
        if now - self._heard_at.get(run, -HEARD_EVERY_S) < HEARD_EVERY_S:
            return
        if len(self._heard_at) >= MAX_HEARD_RUNS:
            self._heard_at.clear()
        self._heard_at[run] = now
        self.writer.put_heard(project, experiment_name)

    def otlp(self, spans: SpanPairs, b64_ids: bool, projects: frozenset[str] | None = None) -> SpansReceived:
        """One OTLP request's spans (otlp.json_spans / pb_spans): mapped to runs and lanes, validated, stored.
        `projects`: the only projects its sender may write (None: any); other projects' spans are refused, counted."""
        started = time.perf_counter()
        since = self.writer.seq() if self.writer is not None else None
        batches, counts = to_batches(spans, b64_ids, self.clock)
        accepted, rejected = 0, counts.pop("too_many", 0)
        error = (
            f"too_many_spans: only the first {MAX_SPANS_PER_REQUEST} spans of one request are kept" if rejected else ""
        )
        reasons: Counter = Counter({"too_many_spans": rejected} if rejected else {})
        for obj in batches.values():
            batch, result = apply_batch(obj, self.store, projects)
            self.spans.put(result.span_starts, result.spans, batch.client.host, None)
            accepted += result.accepted
            rejected += result.rejected
            if result.errors and not error:
                error = f"{result.errors[0]['reason']}: {result.errors[0]['detail']}"
            reasons.update(result.reasons)
        self._count({"otlp_spans": accepted}, reasons)
        for what, n in counts.items():  # capped attributes, spans without a run identity, steps from the run's clock
            self.metrics.otlp_intake.labels(what).inc(n)
        self.metrics.latency.observe(time.perf_counter() - started)
        return SpansReceived(accepted, rejected, error, self._receipt(since) if accepted else None)

    def otlp_metrics(self, batches: list[dict[str, Any]], counts: Counter,
                     projects: frozenset[str] | None = None) -> SpansReceived:
        """One OTLP metrics request, converted (otlp_metrics.OtlpMetrics.to_batches): each batch validated and sent
        to the metric sinks like an ingest batch (`projects`: as for `otlp`). Its processes never say goodbye, so they
        are not step loggers whose silence makes a run lost; a step metric among them moves the run's step clock."""
        started = time.perf_counter()
        since = self.writer.seq() if self.writer is not None else None
        refused = sum(counts.values())
        accepted, rejected = 0, refused
        error = ", ".join(f"{why}: {n}" for why, n in counts.items() if why not in ("capped", "unassigned"))
        reasons: Counter = Counter({k: v for k, v in counts.items() if k not in ("capped", "unassigned")})
        for obj in batches:
            steps = obj.pop("_steps", [])
            obj.pop("_index", None)
            batch, result = apply_batch(obj, self.store, projects)
            if self.writer is not None:
                self.writer.put_samples(result.samples)
            for send in self.on_samples:
                send(result.samples)
            self.clients.seen(batch.client, [], [], False, logs_steps=False)
            accepted += result.accepted
            rejected += result.rejected
            if result.errors and not error:
                error = f"{result.errors[0]['reason']}: {result.errors[0]['detail']}"
            reasons.update(result.reasons)
            self.clock.note_steps(batch.client.project, batch.client.experiment_name, steps)
        rejected -= counts.get("capped", 0) + counts.get("unassigned", 0)  # kept: capped or in the unassigned run
        self._count({"otlp_metric_points": accepted}, reasons)
        for what in ("capped", "unassigned"):
            if counts.get(what):
                self.metrics.otlp_intake.labels(f"metrics_{what}").inc(counts[what])
        self.metrics.latency.observe(time.perf_counter() - started)
        return SpansReceived(accepted, max(0, rejected), error, self._receipt(since) if accepted else None)

    def _receipt(self, since: int | None) -> Receipt | None:
        """What was handed to the run store since `since` (None: no run store)."""
        return Receipt(since, self.writer.seq()) if self.writer is not None and since is not None else None

    def _count(self, accepted: "dict[str, int] | Counter", refused: "dict[str, int] | Counter") -> None:
        for section, n in accepted.items():
            self.metrics.accepted.labels(section).inc(n)
        for reason, n in refused.items():
            self.metrics.rejected.labels(reason).inc(n)

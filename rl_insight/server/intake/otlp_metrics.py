"""OTLP metrics intake: the numbers of any OpenTelemetry-instrumented framework (NeMo-RL, XTuner, an SDK program)
become the same series and samples as our own ingest, so they reach /metrics, the run store and the exporters
through the one validation (`protocol.decode_batch`, via the intake pipeline).

`POST /v1/metrics` (OTLP/HTTP protobuf or JSON, gzip) and the metrics service of the OTLP/gRPC intake. Mapping:

* **Kinds**: Gauge → gauge; Sum, monotonic → counter; Sum, not monotonic → gauge (its running value);
  explicit-bucket Histogram → histogram (its bounds, cumulative bucket counts). ExponentialHistogram and Summary
  are refused and counted (`exponential_histogram`, `summary`): converting a base-2 exponential histogram to fixed
  bounds would invent counts.
* **Temporality**: cumulative points are taken as they are (one client per exporter start: the point's
  `start_time_unix_nano`, so two processes' totals add up and a restart starts a new total); delta points are
  added up here, per run, series and labels, into the cumulative value the store expects — the totals are exact
  whichever temporality the exporter chose; a resent window is added once, and the totals are bounded per run
  (intake/otlp_deltas.py).
* **Run identity**, as for traces (intake/otlp.py): the data point's `project` + `experiment_name` attributes, the
  resource's, a `service.name` written `<project>/<experiment_name>`, else the visible run `unassigned/<service>`.
* **Names**, as the OpenTelemetry Prometheus exporter writes them (docs/otel.md): characters outside
  `[a-zA-Z0-9_:]` become `_`, runs of `_` collapse, a unit suffix is added (`s` → `_seconds`, `ms` →
  `_milliseconds`, `By` → `_bytes`, `1` → `_ratio` on gauges, `X/Y` → `_X_per_Y`, `{annotations}` dropped) unless
  the name already ends with it, and a counter's trailing `_total` is left to the exposition (which adds it once).
  Attribute keys become label names the same way.
* **Steps**: a sample gets the run's step at its time from the run's step clock (server/live/step_clock.py: the last
  step completed then, as our own clients stamp samples), so charts by step work; a metric named like the step
  metric is the clock itself.
* **Bounded**: at most MAX_POINTS_PER_REQUEST points a request, MAX_LABELS attributes a point; the rest refused
  and counted in the answer's partial success. A point is validated as `decode_batch` will (series and value)
  before anything is kept for it.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any, Iterator

from ...errors import MalformedBodyError
from ...protocol import MAX_LABEL_VALUE, MAX_LABELS, ItemError
from ...protocol.batch import check_series, check_value
from ...semantics.names import InvalidNameError, sanitize_label_name, sanitize_metric_name
from .otlp import UNASSIGNED, _identity
from .otlp_deltas import DeltaRefused, DeltaTotals

MAX_POINTS_PER_REQUEST = 20_000
UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds", "min": "minutes",
              "h": "hours", "d": "days", "By": "bytes", "KiBy": "kibibytes", "MiBy": "mebibytes", "GiBy": "gibibytes",
              "KBy": "kilobytes", "MBy": "megabytes", "GBy": "gigabytes", "%": "percent", "Hz": "hertz",
              "W": "watts", "J": "joules", "Cel": "celsius", "m": "meters"}
DELTA, CUMULATIVE = 1, 2  # AggregationTemporality
KIND_NAMES = {"g": "gauge", "c": "counter", "h": "histogram"}


def prometheus_name(name: str, unit: str, kind: str) -> str:
    """The OpenTelemetry Prometheus exporter's name for a metric (see the module); the exposition adds the
    `rl_insight_monitor_` prefix and a counter's `_total`."""
    base = sanitize_metric_name(name)
    while "__" in base:
        base = base.replace("__", "_")
    words = _unit_words(unit, kind)
    if words and not base.endswith("_" + words):
        base = f"{base}_{words}"
    if kind == "c" and base.endswith("_total"):
        base = base[: -len("_total")] or base
    return base


def _unit_words(unit: str, kind: str) -> str:
    unit = "".join(ch for ch in _drop_braces(unit or "") if not ch.isspace())
    if not unit:
        return ""
    if unit == "1":
        return "ratio" if kind == "g" else ""
    num, _, per = unit.partition("/")
    words = UNIT_WORDS.get(num, num)
    if per:
        words = f"{words}_per_{UNIT_WORDS.get(per, per)}" if words else f"per_{UNIT_WORDS.get(per, per)}"
    try:
        return sanitize_metric_name(words).strip("_")
    except InvalidNameError:
        return ""


def _drop_braces(unit: str) -> str:
    out, depth = [], 0
    for ch in unit:
        depth += ch == "{"
        if depth == 0:
            out.append(ch)
        depth -= ch == "}" and depth > 0
    return "".join(out)


def _value(v: Any) -> Any:
    """An AnyValue (protobuf) as a Python value."""
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which in ("array_value", "kvlist_value", "bytes_value"):
        return str(getattr(v, which))[:MAX_LABEL_VALUE]
    return getattr(v, which)


def _attrs(kvs: Any, limit: int = MAX_LABELS * 4) -> dict[str, Any]:
    out = {}
    for kv in list(kvs)[:limit]:
        out[kv.key] = _value(kv.value)
    return out


def _labels(attrs: dict[str, Any], counts: Counter) -> dict[str, str]:
    labels: dict[str, str] = {}
    for k, v in attrs.items():
        if k in ("project", "experiment_name") or v is None:
            continue  # identity, not a label
        try:
            name = sanitize_label_name(k)
        except InvalidNameError:
            counts["invalid_label"] += 1
            continue
        while "__" in name[1:]:
            name = name[0] + name[1:].replace("__", "_")
        if len(labels) >= MAX_LABELS - 2:  # room for the identity pair
            counts["capped"] += 1
            break
        labels[name] = str(v)[:MAX_LABEL_VALUE]
    return labels


def _without_extension_keys(doc: Any) -> Any:
    """OTLP/JSON with every key of the form "[…]" left out: protobuf reads such a key as an extension and refuses it
    even when told to ignore unknown fields, and OTLP says a receiver ignores what it does not know."""
    if isinstance(doc, dict):
        return {k: _without_extension_keys(v) for k, v in doc.items()
                if not (isinstance(k, str) and k.startswith("[") and k.endswith("]"))}
    if isinstance(doc, list):
        return [_without_extension_keys(v) for v in doc]
    return doc


class OtlpMetrics:
    """Converts OTLP metrics requests into ingest batches, keeping the running totals of delta points."""

    def __init__(self, step_metric: str = "training/global_step", clock: Any = None,
                 deltas: DeltaTotals | None = None) -> None:
        self.step_name = sanitize_metric_name(step_metric)
        self.clock = clock
        self.deltas = deltas if deltas is not None else DeltaTotals()  # the running totals of delta points

    def decode(self, body: bytes, content_type: str) -> Any:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        msg = ExportMetricsServiceRequest()
        try:
            if content_type.split(";", 1)[0].strip().lower() == "application/json":
                from google.protobuf import json_format

                doc = _without_extension_keys(json.loads(body.decode("utf-8", "replace")))
                json_format.ParseDict(doc, msg, ignore_unknown_fields=True)
            else:
                msg.ParseFromString(body)
        except RecursionError:
            raise MalformedBodyError("OTLP metrics request nested too deeply") from None
        except Exception as exc:  # protobuf's DecodeError, json_format's ParseError
            raise MalformedBodyError(f"not an OTLP ExportMetricsServiceRequest: {str(exc)[:200]}",
                                     hint="send OTLP/HTTP protobuf (application/x-protobuf) or OTLP/JSON") from None
        return msg

    def to_batches(self, msg: Any) -> tuple[list[dict[str, Any]], Counter]:
        """One ingest batch (protocol form) per (run, client); counts of what was refused or capped."""
        counts: Counter = Counter()
        batches: dict[tuple, dict[str, Any]] = {}
        n = 0
        for rm in msg.resource_metrics:
            resource = _attrs(rm.resource.attributes)
            rkey = hashlib.sha256(repr(sorted((k, str(v)) for k, v in resource.items())).encode()).hexdigest()[:16]
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    for point, kind, temporality in self._points(m, counts):
                        n += 1
                        if n > MAX_POINTS_PER_REQUEST:
                            counts["too_many"] += 1
                            continue
                        self._add(batches, resource, rkey, m, point, kind, temporality, counts)
        return list(batches.values()), counts

    def _points(self, m: Any, counts: Counter) -> Iterator[tuple[Any, str, int]]:
        which = m.WhichOneof("data")
        if which == "gauge":
            yield from ((p, "g", CUMULATIVE) for p in m.gauge.data_points)
        elif which == "sum":
            kind = "c" if m.sum.is_monotonic else "g"
            yield from ((p, kind, m.sum.aggregation_temporality) for p in m.sum.data_points)
        elif which == "histogram":
            yield from ((p, "h", m.histogram.aggregation_temporality) for p in m.histogram.data_points)
        elif which == "exponential_histogram":
            counts["exponential_histogram"] += len(m.exponential_histogram.data_points)
        elif which == "summary":
            counts["summary"] += len(m.summary.data_points)

    def _add(self, batches: dict[tuple, dict[str, Any]], resource: dict[str, Any], rkey: str, m: Any, p: Any,
             kind: str, temporality: int, counts: Counter) -> None:
        attrs = _attrs(p.attributes)
        project, experiment = _identity(attrs, resource)
        if project == UNASSIGNED:
            counts["unassigned"] += 1
        try:
            name = prometheus_name(m.name, m.unit, kind)
        except InvalidNameError:
            counts["invalid_metric_name"] += 1
            return
        # the run identity is a pair of labels on every series, as our own clients send it (client/wire.py)
        labels = {**_labels(attrs, counts), "project": project, "experiment_name": experiment}
        delta = temporality == DELTA
        # cumulative points: one client per exporter start (their totals add up); delta points: one per resource,
        # their running total kept here
        client = f"otlp-{rkey}" + ("" if delta or kind == "g" else f"-{p.start_time_unix_nano}")
        ts = p.time_unix_nano / 1e9 if p.time_unix_nano else 0.0
        if kind == "h":
            bounds = list(p.explicit_bounds)
            buckets = [int(c) for c in p.bucket_counts]
            if len(buckets) != len(bounds) + 1:
                counts["invalid_histogram"] += 1
                return
            value: Any = [float(p.sum), int(p.count), buckets]
        else:
            value = p.as_double if p.WhichOneof("value") == "as_double" else float(p.as_int)
            bounds = None
        entry: dict[str, Any] = {"k": kind, "n": name, "l": labels, "d": (m.description or "")[:1000]}
        if bounds is not None:
            entry["b"] = bounds
        try:  # decode_batch's own checks, before any state is kept for the point (a refused one costs nothing here)
            check_series(entry)
            if kind == "h":
                check_value("histogram", _cumulative(value), len(value[2]))
            else:
                check_value(KIND_NAMES[kind], value)
            if delta:
                value = self.deltas.add((project, experiment), (client, name, kind, tuple(bounds or ()),
                                                                tuple(sorted(labels.items()))),
                                        (p.start_time_unix_nano, p.time_unix_nano), value)
        except (ItemError, DeltaRefused) as exc:
            counts[exc.reason] += 1
            return
        if kind == "h":
            value = _cumulative(value)
        step = None
        is_step = name == self.step_name and kind == "g"  # the step metric itself: the run's step clock
        if is_step:
            step = value
        elif self.clock is not None and project != UNASSIGNED and ts:
            step = self.clock.value_at(project, experiment, ts)  # the last completed step, as our clients stamp it
        b = batches.setdefault((project, experiment, client), {
            "v": 1, "client": {"id": client, "host": str(resource.get("host.name") or "")[:256],
                               "project": project, "experiment_name": experiment},
            "series": [], "samples": [], "span_starts": [], "spans": [], "_index": {}})
        key = (kind, name, tuple(sorted(labels.items())), tuple(bounds or ()))
        idx = b["_index"].get(key)
        if idx is None:
            idx = b["_index"][key] = len(b["series"])
            b["series"].append(entry)
        b["samples"].append([idx, ts, step, value])
        if is_step and isinstance(step, float) and step == step and 0 <= step < 2**53:
            b.setdefault("_steps", []).append((int(step), ts))


def _cumulative(value: list) -> list:
    """A histogram point's [sum, count, per-bucket counts] as [sum, count, cumulative counts]."""
    running, cum = 0, []
    for c in value[2]:
        running += c
        cum.append(running)
    return [value[0], value[1], cum]

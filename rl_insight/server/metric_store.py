"""Latest value per series for /metrics: gauges, cumulative counters and histograms of all runs.

Counters and histograms arrive *cumulative per client* (each client process has a random id), so
the store keeps the last total per (series, client) and exposes the sum. Applying the same batch
twice, or a resent snapshot after a server restart, therefore never double counts.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Iterable, Literal

from prometheus_client.metrics_core import Metric

from ..names import METRIC_PREFIX, InvalidNameError, sanitize_label_name, sanitize_metric_name

Kind = Literal["gauge", "counter", "histogram"]
KINDS: dict[str, Kind] = {"g": "gauge", "c": "counter", "h": "histogram"}
NAMESPACES = {None: METRIC_PREFIX, "client": "rl_insight_client_"}
MAX_LABELS = 64
MAX_LABEL_VALUE = 2048
MAX_DOC = 1024


class ItemError(ValueError):
    """One invalid item of a batch; `reason` is a short machine-readable key."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class _Series:
    labels: dict[str, str]
    touched: float = 0.0  # monotonic time of the last update
    value: float = 0.0  # gauge value
    ts: float = -math.inf  # client timestamp of the gauge value
    per_client: dict[str, object] = field(default_factory=dict)  # counter: float; histogram: (sum, count, cumulative)


@dataclass
class _Family:
    name: str  # exposed name (counters without `_total`)
    kind: Kind
    doc: str
    bounds: tuple[float, ...] | None = None
    series: dict[tuple, _Series] = field(default_factory=dict)


@dataclass(frozen=True)
class SeriesRef:
    """A validated series definition from a batch, resolved once per batch."""

    family: _Family
    key: tuple
    labels: dict[str, str]
    base_name: str = ""  # sanitized name without the namespace prefix (what the run store records)
    namespace: str | None = None


def _clean_labels(raw: object) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ItemError("invalid_labels", f"labels must be an object, found {type(raw).__name__}")
    if len(raw) > MAX_LABELS:
        raise ItemError("invalid_labels", f"at most {MAX_LABELS} labels per series, found {len(raw)}")
    out: dict[str, str] = {}
    for k, v in raw.items():
        try:
            name = sanitize_label_name(k)
        except InvalidNameError as exc:
            raise ItemError("invalid_label_name", str(exc)) from None
        if name in out:
            raise ItemError("invalid_label_name", f"labels {k!r} and another label both become {name!r} after sanitizing")
        if isinstance(v, (dict, list)):
            raise ItemError("invalid_label_value", f"label {k!r} must be a scalar, found {type(v).__name__}")
        sv = v if isinstance(v, str) else str(v)
        if len(sv) > MAX_LABEL_VALUE:
            raise ItemError("invalid_label_value", f"label {k!r} value is {len(sv)} characters; at most {MAX_LABEL_VALUE}")
        out[name] = sv
    return out


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class MetricStore:
    def __init__(self, series_ttl_s: float = 3600.0, max_series_per_metric: int = 10_000) -> None:
        self._ttl = series_ttl_s
        self._cap = max_series_per_metric
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}
        self._last_sweep = time.monotonic()

    # ----------------------------------------------------------------- ingest
    def resolve(self, entry: object) -> SeriesRef:
        """Validate one series definition of a batch and find (or create) its family and series."""
        if not isinstance(entry, dict):
            raise ItemError("invalid_series", f"series entry must be an object, found {type(entry).__name__}")
        k, ns = entry.get("k"), entry.get("ns")
        kind = KINDS.get(k) if isinstance(k, str) else None
        if kind is None:
            raise ItemError("invalid_series", f"series kind must be one of {sorted(KINDS)}, found {k!r:.50}")
        if not (ns is None or isinstance(ns, str)) or ns not in NAMESPACES:
            raise ItemError("invalid_series", f"unknown namespace {ns!r:.50}")
        try:
            base = sanitize_metric_name(entry.get("n"))  # type: ignore[arg-type]
        except InvalidNameError as exc:
            raise ItemError("invalid_metric_name", str(exc)) from None
        if kind == "counter" and base.endswith("_total"):
            base = base[: -len("_total")] or base
        name = NAMESPACES[ns] + base
        labels = _clean_labels(entry.get("l"))
        if kind == "histogram" and "le" in labels:
            raise ItemError("invalid_label_name", "label 'le' is reserved for histogram buckets")
        doc = entry.get("d") or ""
        doc = doc[:MAX_DOC] if isinstance(doc, str) else ""
        bounds = None
        if kind == "histogram":
            b = entry.get("b")
            if not isinstance(b, list) or not b or not all(_is_number(x) and math.isfinite(x) for x in b):
                raise ItemError("invalid_series", "histogram series needs 'b': a non-empty list of finite bucket bounds")
            bounds = tuple(float(x) for x in b)
            if list(bounds) != sorted(set(bounds)):
                raise ItemError("invalid_series", "histogram bucket bounds must be strictly increasing")
        key = tuple(sorted(labels.items()))
        with self._lock:
            fam = self._families.get(name)
            if fam is None:
                fam = self._families[name] = _Family(name, kind, doc or f"{kind.capitalize()} {entry.get('n')}", bounds)
            elif fam.kind != kind:
                raise ItemError("type_conflict", f"metric {name!r} is a {fam.kind}; cannot record a {kind} under the same name")
            elif bounds is not None and fam.bounds != bounds:
                raise ItemError("bucket_conflict", f"histogram {name!r} has buckets {list(fam.bounds or ())}; got {list(bounds)}")
            if key not in fam.series and len(fam.series) >= self._cap:
                raise ItemError("series_cap", f"metric {name!r} already has {self._cap} series (max_series_per_metric); new series refused")
        return SeriesRef(fam, key, labels, base, ns)

    def apply(self, ref: SeriesRef, client_id: str, ts: float, value: object) -> float | tuple[float, float]:
        """Apply one sample; return the series' exposed value (gauge value, counter total across
        clients, histogram (sum, count) across clients). Raises ItemError for a value that does not fit."""
        fam = ref.family
        now = time.monotonic()
        if fam.kind == "gauge":
            if not _is_number(value):
                raise ItemError("invalid_value", f"gauge value must be a number, found {value!r}")
            with self._lock:
                s = self._series(fam, ref)
                s.touched = now
                if ts >= s.ts:  # a late or resent older sample never overwrites a newer one
                    s.value, s.ts = float(value), ts
                return float(value)  # type: ignore[arg-type]
        elif fam.kind == "counter":
            if not _is_number(value) or not (value >= 0) or math.isinf(value):
                raise ItemError("invalid_value", f"counter value must be a finite cumulative number >= 0, found {value!r}")
            with self._lock:
                s = self._series(fam, ref)
                s.touched = now
                prev = s.per_client.get(client_id, 0.0)
                s.per_client[client_id] = max(prev, float(value))  # type: ignore[arg-type]
                return float(sum(s.per_client.values()))  # type: ignore[arg-type]
        else:
            total, count, cumulative = self._check_histogram(fam, value)
            with self._lock:
                s = self._series(fam, ref)
                s.touched = now
                prev = s.per_client.get(client_id)
                if prev is None or count >= prev[1]:  # type: ignore[index]
                    s.per_client[client_id] = (total, count, cumulative)
                parts = s.per_client.values()
                return (sum(p[0] for p in parts), float(sum(p[1] for p in parts)))  # type: ignore[index]

    @staticmethod
    def _check_histogram(fam: _Family, value: object) -> tuple[float, int, tuple[int, ...]]:
        n = len(fam.bounds or ()) + 1
        if not (isinstance(value, list) and len(value) == 3 and _is_number(value[0]) and _is_number(value[1])
                and isinstance(value[2], list) and len(value[2]) == n and all(isinstance(c, int) and c >= 0 for c in value[2])):
            raise ItemError("invalid_value", f"histogram value must be [sum, count, [{n} cumulative bucket counts]]")
        cumulative = tuple(value[2])
        if any(b < a for a, b in zip(cumulative, cumulative[1:])) or cumulative[-1] != value[1]:
            raise ItemError("invalid_value", "histogram bucket counts must be cumulative and end at the total count")
        return float(value[0]), int(value[1]), cumulative

    def _series(self, fam: _Family, ref: SeriesRef) -> _Series:
        s = fam.series.get(ref.key)
        if s is None:
            if len(fam.series) >= self._cap:
                raise ItemError("series_cap", f"metric {fam.name!r} already has {self._cap} series; new series refused")
            s = fam.series[ref.key] = _Series(ref.labels)
        return s

    # ----------------------------------------------------------------- exposition
    def series_count(self) -> int:
        with self._lock:
            return sum(len(f.series) for f in self._families.values())

    def _sweep(self, now: float) -> None:
        cutoff = now - self._ttl
        for name in list(self._families):
            fam = self._families[name]
            for key in [k for k, s in fam.series.items() if s.touched < cutoff]:
                del fam.series[key]
            if not fam.series:
                del self._families[name]

    def snapshot(self) -> list[Metric]:
        """Build exposition families. The lock is held only to copy state."""
        now = time.monotonic()
        rows: list[tuple[str, Kind, str, tuple | None, list[tuple[dict, object]]]] = []
        with self._lock:
            if now - self._last_sweep > min(60.0, self._ttl / 4):
                self._sweep(now)
                self._last_sweep = now
            cutoff = now - self._ttl
            for fam in self._families.values():
                items: list[tuple[dict, object]] = []
                for s in fam.series.values():
                    if s.touched < cutoff:
                        continue
                    if fam.kind == "gauge":
                        items.append((s.labels, s.value))
                    else:
                        items.append((s.labels, list(s.per_client.values())))
                rows.append((fam.name, fam.kind, fam.doc, fam.bounds, items))
        return [self._metric(*row) for row in rows if row[4]]

    @staticmethod
    def _metric(name: str, kind: Kind, doc: str, bounds: tuple | None, items: Iterable[tuple[dict, object]]) -> Metric:
        m = Metric(name, doc, kind)
        for labels, value in items:
            if kind == "gauge":
                m.add_sample(name, labels, value)  # type: ignore[arg-type]
            elif kind == "counter":
                m.add_sample(name + "_total", labels, float(sum(value)))  # type: ignore[arg-type]
            else:
                parts = value  # list of (sum, count, cumulative) per client
                total = sum(p[0] for p in parts)  # type: ignore[index]
                count = sum(p[1] for p in parts)  # type: ignore[index]
                cum = [sum(p[2][i] for p in parts) for i in range(len(bounds or ()) + 1)]  # type: ignore[index]
                for bound, c in zip(list(bounds or ()) + [math.inf], cum):
                    le = "+Inf" if math.isinf(bound) else repr(float(bound))
                    m.add_sample(name + "_bucket", {**labels, "le": le}, float(c))
                m.add_sample(name + "_count", labels, float(count))
                m.add_sample(name + "_sum", labels, total)
        return m


class StoreCollector:
    """prometheus_client collector adapter for a MetricStore."""

    def __init__(self, store: MetricStore) -> None:
        self._store = store

    def collect(self) -> Iterable[Metric]:
        return self._store.snapshot()

"""Latest value per series for /metrics: gauges, cumulative counters and histograms of all runs.

Counters and histograms arrive *cumulative per client* (each client process has a random id), so
the store keeps the last total per (series, client) and exposes the sum. Applying the same batch
twice, or a resent snapshot after a server restart, therefore never double counts.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, NamedTuple, cast

from prometheus_client.metrics_core import Metric

from ...protocol import ItemError, SeriesDef
from ...semantics.names import METRIC_PREFIX, InvalidNameError, sanitize_label_name, sanitize_metric_name

Kind = Literal["gauge", "counter", "histogram"]
PREFIXES = {None: METRIC_PREFIX, "client": "rl_insight_client_"}
KNOWN_DEFINITIONS = 65_536  # series definitions whose resolution the store remembers (MetricStore._known)


@dataclass
class _Series:
    labels: dict[str, str]
    touched: float = 0.0  # monotonic time of the last update
    value: float = 0.0  # gauge value
    ts: float = -math.inf  # client timestamp of the gauge value
    per_client: dict[str, Any] = field(default_factory=dict)  # counter: float; histogram: (sum, count, cumulative)
    writer: str = ""  # gauge: the client whose value it shows
    cost: int = 0  # estimated bytes (labels), for the store's size bound


@dataclass
class _Family:
    name: str  # exposed name (counters without `_total`)
    kind: Kind
    doc: str
    bounds: tuple[float, ...] | None = None
    series: dict[tuple, _Series] = field(default_factory=dict)
    cost: int = 0
    owner: str = ""  # the client that created it (per-client family bound)
    ttl: float | None = None  # its own series TTL (agent-loop info series), else the store's


class SeriesRef(NamedTuple):
    """A validated series definition from a batch, resolved onto its family and series (immutable; a NamedTuple:
    twenty a batch, a frozen dataclass's constructor cost 2.5x as much)."""

    family: _Family
    key: tuple
    labels: dict[str, str]
    base_name: str = ""  # sanitized name without the namespace prefix (what the run store records)
    namespace: str | None = None


def _exposed_labels(raw: dict[str, str]) -> dict[str, str]:
    """Label names mapped onto Prometheus' alphabet (values were validated by the protocol)."""
    out: dict[str, str] = {}
    for k, v in raw.items():
        try:
            name = sanitize_label_name(k)
        except InvalidNameError as exc:
            raise ItemError("invalid_label_name", str(exc)) from None
        if name in out:
            raise ItemError("invalid_label_name", f"labels {k!r} and another label both become {name!r} after "
                                                  "sanitizing")
        out[name] = v
    return out


# The exposed name, labels and series key of a definition: a pure function, outside the store's lock, remembered
# by definition (decode_batch hands out the same SeriesDef for the same definition, protocol/batch.py: _series_of,
# so a client's series are worked out once, not in every batch; definitions never reused make it start evicting).
@functools.lru_cache(maxsize=65_536)
def exposed_names(kind: str, name: str) -> tuple[str, ...]:
    """Every name a family writes into the exposition (its HELP/TYPE name and its samples' names): a counter `x` is
    `x_total`, a histogram `x` is `x` with `x_bucket`, `x_count` and `x_sum`, a gauge `x` is `x`."""
    if kind == "counter":
        return (name + "_total",)
    if kind == "histogram":
        return (name, name + "_bucket", name + "_count", name + "_sum")
    return (name,)


def prepare_series(d: SeriesDef, namespace: str | None) -> tuple[Kind, str, str, dict[str, str], tuple]:
    """A series definition's kind, base name, exposed name, labels and key (ItemError for a name or label no sink
    can take): pure, the same for /metrics and the run store."""
    try:
        base = sanitize_metric_name(d.name)
    except InvalidNameError as exc:
        raise ItemError("invalid_metric_name", str(exc)) from None
    kind = cast(Kind, d.kind)  # decode_batch admits only the three kinds
    if kind == "counter" and base.endswith("_total"):
        base = base[: -len("_total")] or base
    # a client's `server.namespace` replaces the trainer-scalar prefix (upstream's meaning of it)
    name = (namespace + "_" if namespace and d.ns is None else PREFIXES[d.ns]) + base
    labels = _exposed_labels(d.labels)
    if kind == "histogram" and "le" in labels:
        raise ItemError("invalid_label_name", "label 'le' is reserved for histogram buckets")
    return kind, base, name, labels, tuple(sorted(labels.items()))


class MetricStore:
    """Bounded by count *and* size: series per metric, metric families in all and per client, and an
    estimate of the bytes the names, docs and labels take. Past a bound new series are refused and
    counted; existing series keep updating, so one client's flood never costs another's data."""

    def __init__(self, series_ttl_s: float = 3600.0, max_series_per_metric: int = 10_000,
                 max_families: int = 20_000, max_families_per_client: int = 5_000,
                 max_bytes: int = 256 * 2**20, ttl_by_prefix: dict[str, float] | None = None) -> None:
        self._ttl = series_ttl_s
        # metric names (before the exposition prefix) whose series leave /metrics sooner: one series per agent-loop
        # trajectory would otherwise pile up for an hour (Prometheus and the run store keep them)
        self._ttl_by_prefix = dict(ttl_by_prefix or {})
        self._cap = max_series_per_metric
        self._max_families = max_families
        self._max_families_per_client = max_families_per_client
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}
        self._exposed: dict[str, str] = {}  # every name a family writes into /metrics -> that family (exposed_names)
        # several servers on one store (fleet/coordinator.py): only the clients this server owns are exposed, so
        # Prometheus, scraping every server, counts a process that reaches two of them once; None: every client
        self._owned: set[str] | None = None
        self._undecided: set[str] = set()  # clients heard since the last round, neither owned nor another's
        self._foreign: dict[str, float] = {}  # clients another server owns -> when a round said so (monotonic)
        self._families_by_client: dict[str, int] = {}
        # each series definition's SeriesRef, by (definition, namespace): decode_batch hands out the same SeriesDef
        # for the same definition, and a client defines its series in every batch; a remembered ref is used while
        # its family is the one exposed and the series fits it (what _resolve_locked would have found)
        self._known: dict[tuple[SeriesDef, str | None], SeriesRef] = {}
        self.bytes_used = 0
        self._last_sweep = time.monotonic()

    # ----------------------------------------------------------------- ingest
    def resolve(self, d: SeriesDef, client_id: str = "", namespace: str | None = None) -> SeriesRef:
        """Map a validated series definition onto its exposed family and series (creating them)."""
        prepared = prepare_series(d, namespace)
        with self._lock:
            return self._resolve_locked(d, client_id, *prepared)

    def resolve_many(self, defs: list[SeriesDef | ItemError], client_id: str, namespace: str | None
                     ) -> list[SeriesRef | ItemError]:
        """`resolve` for one batch's series definitions: names and labels worked out outside the lock, then all of
        them under one acquisition of it (see apply_many). Refusals stay in place, item by item."""
        known = self._known
        prepared = self._prepared(defs, namespace)
        out: list[SeriesRef | ItemError] = []
        with self._lock:
            for d, p in zip(defs, prepared):
                if isinstance(d, ItemError) or isinstance(p, ItemError):
                    out.append(d if isinstance(d, ItemError) else p)  # type: ignore[arg-type]  # p is the error here
                    continue
                if isinstance(p, SeriesRef):
                    fam = p.family  # still the family exposed under its name, and the series still fits it
                    if self._families.get(fam.name) is fam and (p.key in fam.series or len(fam.series) < self._cap):
                        out.append(p)
                        continue
                    p = prepare_series(d, namespace)
                try:
                    ref = self._resolve_locked(d, client_id, *p)
                except ItemError as err:
                    out.append(err)
                    continue
                if len(known) >= KNOWN_DEFINITIONS:  # a stream of ever-new definitions: start over, never grow
                    known.clear()
                known[(d, namespace)] = ref
                out.append(ref)
        return out

    def _prepared(self, defs: list[SeriesDef | ItemError], namespace: str | None
                  ) -> list[SeriesRef | tuple | ItemError]:
        """Each definition's reference when it is known, else its names and labels worked out (without the lock)."""
        known = self._known
        prepared: list[SeriesRef | tuple | ItemError] = []
        for d in defs:
            if isinstance(d, ItemError):
                prepared.append(d)
                continue
            ref = known.get((d, namespace))
            if ref is not None:
                prepared.append(ref)
                continue
            try:
                prepared.append(prepare_series(d, namespace))
            except ItemError as err:
                prepared.append(err)
        return prepared

    def _resolve_locked(self, d: SeriesDef, client_id: str, kind: Kind, base: str, name: str,
                        labels: dict[str, str], key: tuple) -> SeriesRef:
        """(with the lock held)"""
        fam = self._families.get(name)
        if fam is None:
            if len(self._families) >= self._max_families:
                raise ItemError("family_cap", f"the server already exposes {self._max_families} metrics; new "
                                              f"metric {name!r} refused")
            mine = self._families_by_client.get(client_id, 0)
            if mine >= self._max_families_per_client:
                raise ItemError("family_cap", f"this client already created {mine} metrics (the per-client limit); "
                                              f"new metric {name!r} refused")
            cost = len(name) + len(d.doc) + 100
            if self.bytes_used + cost > self._max_bytes:
                raise ItemError("memory_cap", f"metric store is at its size limit ({self._max_bytes} bytes); "
                                              f"{name!r} refused")
            names = exposed_names(kind, name)
            clash = next((n for n in names if n in self._exposed), None)
            if clash is not None:  # two HELP lines for one name: promtool fails, Prometheus keeps one of them
                other = self._families[self._exposed[clash]]
                raise ItemError("name_collision", f"{kind} {name!r} would write {clash!r} into /metrics, which "
                                                  f"{other.kind} {other.name!r} already writes; rename one of them")
            fam = self._families[name] = _Family(
                name,
                kind,
                d.doc or f"{kind.capitalize()} {d.name}",
                d.bounds,
                cost=cost,
                owner=client_id,
                ttl=next((t for p, t in self._ttl_by_prefix.items() if base.startswith(p)), None),
            )
            self._families_by_client[client_id] = mine + 1
            self.bytes_used += cost
            self._exposed.update(dict.fromkeys(names, name))
        elif fam.kind != kind:
            raise ItemError("type_conflict", f"metric {name!r} is a {fam.kind}; cannot record a {kind} under the "
                                             "same name")
        elif d.bounds is not None and fam.bounds != d.bounds:
            raise ItemError("bucket_conflict", f"histogram {name!r} has buckets {list(fam.bounds or ())}; got "
                                               f"{list(d.bounds)}")
        if key not in fam.series and len(fam.series) >= self._cap:
            raise ItemError("series_cap", f"metric {name!r} already has {self._cap} series "
                                          "(max_series_per_metric); new series refused")
        return SeriesRef(fam, key, labels, base, d.ns)

    def apply(self, ref: SeriesRef, client_id: str, ts: float, value: Any) -> float | tuple[float, float]:
        """Apply one validated sample; return the series' exposed value (gauge value, counter total across
        clients, histogram (sum, count) across clients)."""
        with self._lock:
            return self._apply_locked(ref, client_id, ts, value, time.monotonic())

    def apply_many(self, items: list[tuple[SeriesRef, float, Any]], client_id: str
                   ) -> list[float | tuple[float, float] | ItemError]:
        """`apply` for all of one batch's samples under one acquisition of the lock (a thousand clients' batches a
        second contend for it; one acquisition per sample made it the ingest path's bottleneck: issue 24)."""
        now = time.monotonic()
        out: list[float | tuple[float, float] | ItemError] = []
        with self._lock:
            owned = self._owned
            if owned is not None and client_id not in owned and client_id not in self._foreign:
                self._undecided.add(client_id)
            for ref, ts, value in items:
                try:
                    out.append(self._apply_locked(ref, client_id, ts, value, now))
                except ItemError as err:
                    out.append(err)
        return out

    def _apply_locked(self, ref: SeriesRef, client_id: str, ts: float, value: Any, now: float
                      ) -> float | tuple[float, float]:
        """(with the lock held)"""
        fam = ref.family
        s = self._series(fam, ref)
        s.touched = now
        if fam.kind == "gauge":
            if ts >= s.ts:  # a late or resent older sample never overwrites a newer one
                s.value, s.ts, s.writer = value, ts, client_id
            return value
        if fam.kind == "counter":
            prev = s.per_client.get(client_id, 0.0)
            s.per_client[client_id] = max(prev, value)
            total = math.fsum(s.per_client.values())
            return total if math.isfinite(total) else 1.7976931348623157e308
        total_sum, count, _ = value
        prev = s.per_client.get(client_id)
        if prev is None or count >= prev[1]:
            s.per_client[client_id] = value
        parts = s.per_client.values()
        return (math.fsum(p[0] for p in parts), float(sum(p[1] for p in parts)))

    def _series(self, fam: _Family, ref: SeriesRef) -> _Series:
        s = fam.series.get(ref.key)
        if s is None:
            if len(fam.series) >= self._cap:
                raise ItemError("series_cap", f"metric {fam.name!r} already has {self._cap} series; new series refused")
            cost = sum(len(k) + len(v) for k, v in ref.labels.items()) + 120
            if self.bytes_used + cost > self._max_bytes:
                raise ItemError("memory_cap", f"metric store is at its size limit ({self._max_bytes} bytes); new "
                                              "series refused")
            s = fam.series[ref.key] = _Series(ref.labels, cost=cost)
            self.bytes_used += cost
        return s

    # ----------------------------------------------------------------- exposition
    def series_count(self) -> int:
        with self._lock:
            return sum(len(f.series) for f in self._families.values())

    def _sweep(self, now: float) -> None:
        for name in list(self._families):
            fam = self._families[name]
            cutoff = now - (fam.ttl if fam.ttl is not None else self._ttl)
            self._drop(name, [k for k, s in fam.series.items() if s.touched < cutoff])

    def _drop(self, name: str, keys: list[tuple]) -> None:
        """(with the lock held) Remove these series of family `name`, and the family once it has none."""
        fam = self._families[name]
        for key in keys:
            self.bytes_used -= fam.series.pop(key).cost
        if not fam.series:
            del self._families[name]
            for exposed in exposed_names(fam.kind, name):
                self._exposed.pop(exposed, None)
            self.bytes_used -= fam.cost
            left = self._families_by_client.get(fam.owner, 1) - 1
            if left > 0:
                self._families_by_client[fam.owner] = left
            else:
                self._families_by_client.pop(fam.owner, None)

    def forget_client(self, client_id: str) -> int:
        """A client that moved to another ingest server (several servers, one store): the series only it fed leave
        /metrics at once (Prometheus scrapes every server: the new one has them now, so sums count them once).
        A counter or histogram other clients feed too keeps its total, frozen for this client: a drop would read
        as a counter reset. Returns the series removed."""
        removed = 0
        with self._lock:
            for name in list(self._families):
                fam = self._families[name]
                mine = [k for k, s in fam.series.items()
                        if (s.writer == client_id if fam.kind == "gauge" else set(s.per_client) == {client_id})]
                if mine:
                    removed += len(mine)
                    self._drop(name, mine)
        return removed

    def own_clients(self) -> None:
        """Expose only the clients `set_owned` confirms as this server's (a fleet; until then, none)."""
        with self._lock:
            if self._owned is None:
                self._owned = set()

    def undecided_clients(self) -> set[str]:
        """Clients heard since the last round that no round has given to this server or another (a fleet round asks
        about them as well as its live ones: one that finished before a round is decided too)."""
        with self._lock:
            return set(self._undecided)

    def set_owned(self, mine: Iterable[str], elsewhere: Iterable[str]) -> set[str]:
        """A fleet round's verdict: `mine` are this server's clients (exposed from now on), `elsewhere` another
        server's. One this server never owned is hidden here (the other server shows it; its series are kept, should
        it become this server's). One it owned keeps showing what it had sent, as before a move (the caller drops
        the series only it fed: a counter other processes feed too keeps its part, frozen, since a drop would read
        as a reset to rate()). Returns those that moved away from this server."""
        with self._lock:
            if self._owned is None:
                return set()
            mine, elsewhere = set(mine), set(elsewhere)
            self._owned.update(mine)
            now = time.monotonic()
            moved_away = elsewhere & self._owned
            for cid in elsewhere - self._owned:
                self._foreign[cid] = now
            for cid in mine:
                self._foreign.pop(cid, None)
            self._undecided.difference_update(mine | elsewhere)
            cutoff = now - self._ttl  # (their series are gone by then)
            for cid in [c for c, t in self._foreign.items() if t < cutoff]:
                del self._foreign[cid]
            return moved_away

    def snapshot(self) -> list[Metric]:
        """Build exposition families. The lock is held only to copy state."""
        now = time.monotonic()
        rows: list[tuple[str, Kind, str, tuple | None, list[tuple[dict, object]]]] = []
        with self._lock:
            if now - self._last_sweep > min(60.0, self._ttl / 4, *(t / 4 for t in self._ttl_by_prefix.values())):
                self._sweep(now)
                self._last_sweep = now
            owned = self._owned
            for fam in self._families.values():
                cutoff = now - (fam.ttl if fam.ttl is not None else self._ttl)
                items: list[tuple[dict, object]] = []
                for s in fam.series.values():
                    if s.touched < cutoff:
                        continue
                    if fam.kind == "gauge":
                        if owned is None or s.writer in owned:
                            items.append((s.labels, s.value))
                    elif owned is None:
                        items.append((s.labels, list(s.per_client.values())))
                    else:
                        parts = [v for c, v in s.per_client.items() if c in owned]
                        if parts:
                            items.append((s.labels, parts))
                rows.append((fam.name, fam.kind, fam.doc, fam.bounds, items))
        return [self._metric(*row) for row in rows if row[4]]

    @staticmethod
    def _metric(name: str, kind: Kind, doc: str, bounds: tuple | None, items: Iterable[tuple[dict, Any]]) -> Metric:
        m = Metric(name, doc, kind)
        for labels, value in items:
            if kind == "gauge":
                m.add_sample(name, labels, value)
            elif kind == "counter":
                m.add_sample(name + "_total", labels, float(sum(value)))
            else:
                parts = value  # list of (sum, count, cumulative) per client
                total = sum(p[0] for p in parts)
                count = sum(p[1] for p in parts)
                cum = [sum(p[2][i] for p in parts) for i in range(len(bounds or ()) + 1)]
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

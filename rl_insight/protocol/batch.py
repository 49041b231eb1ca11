"""A batch from a client, its records, and `decode_batch`, the one validation of it at the boundary.

A batch (``POST /api/v1/ingest``, JSON, optionally gzip)::

    {"v": 1, "client": {"id", "pid", "host", "project"?, "experiment_name"?, "rank"?},
     "series": [{"k": "g"|"c"|"h", "n": name, "l": {labels}, "d": doc, "b": [bounds]?, "ns": "client"?}],
     "samples": [[series_index, unix_ts_s, step|null, value]],   # histogram value: [sum, count, [cumulative counts]]
     "span_starts": [{"id", "trace_id", "parent_id", "name", "lane", "start_ns", "kind", "attributes"}],
     "spans": [{... the same ..., "end_ns"}],
     "final": true?}                                              # the process is done (finish / exit)

Protocol 2 is the same plus a per-batch attribute table, so that the attributes spans share (every
state of a lane carries the same ones) are sent and validated once per batch::

     "span_attrs": [{attributes}, ...],
     "span_starts" / "spans": [[id, trace_id, parent_id|null, name, lane|null, start_ns, end_ns|null, kind,
     attrs_index]]

A client sends 1 until an ingest answer lists 2 in `protocols` (a newer client never breaks an older server).

`decode_batch` is the one validation at the boundary. It never raises for a bad *item*: the item is
dropped and reported (section, index, reason) and the rest of the batch is kept. What it returns is
guaranteed to fit every sink: strings are valid UTF-8 (undecodable characters are replaced and the
replacements counted), numbers are finite and inside the ranges SQLite, Prometheus and OTLP hold,
and sizes are capped.
"""

from __future__ import annotations

from .limits import (
    INT64_MAX,
    KINDS,
    MAX_ATTRIBUTE_KEY,
    MAX_ATTRIBUTE_VALUE,
    MAX_BUCKETS,
    MAX_CLIENT_ID,
    MAX_DOC,
    MAX_EXACT_INT,
    MAX_LABEL_NAME,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    MAX_LABELS_BYTES,
    MAX_METRIC_NAME,
    MAX_TS_S,
    NAMESPACES,
    PROTOCOL_VERSION,
    PROTOCOL_VERSIONS,
)
from .spans import SpanRecord, attributes_table_entry, compact_span, span_item
from .values import BatchError, ItemError, TextCleaner, finite_float, short_repr

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any



# --------------------------------------------------------------------------- records
class SeriesDef:
    """A series definition as sent (names not yet sanitized for Prometheus; that is exposition's job)."""

    __slots__ = ("kind", "name", "labels", "doc", "bounds", "ns")

    def __init__(self, kind: str, name: str, labels: dict[str, str], doc: str,
                 bounds: tuple[float, ...] | None, ns: str | None) -> None:
        self.kind = kind  # "gauge" | "counter" | "histogram"
        self.name = name
        self.labels = labels
        self.doc = doc
        self.bounds = bounds
        self.ns = ns


class Sample:
    """One value of a series: a float, or for histograms (sum, count, cumulative bucket counts)."""

    __slots__ = ("series", "ts", "step", "value")

    def __init__(self, series: int, ts: float, step: float | None, value: Any) -> None:
        self.series = series
        self.ts = ts
        self.step = step
        self.value = value


class ClientInfo:
    __slots__ = ("id", "pid", "host", "project", "experiment_name", "namespace", "run_config", "run_tags", "rank")

    def __init__(self, id: str, pid: int | None, host: str, project: str | None, experiment_name: str | None,
                 namespace: str | None = None) -> None:
        self.id = id
        self.pid = pid
        self.host = host
        self.project = project
        self.experiment_name = experiment_name
        self.namespace = namespace  # upstream's `server.namespace`: metric prefix and OTel service.name
        # what init(config=...) said about the run (client/runinfo.py); None when this batch does not carry it
        self.run_config: dict[str, Any] | None = None
        self.run_tags: list[str] | None = None
        self.rank: int | None = None  # the process's rank when it knows one (RANK, torch.distributed)


class Batch:
    """A decoded batch: the items that passed, and every refused item with its section and index."""

    __slots__ = ("client", "series", "samples", "span_starts", "spans", "final", "errors", "replaced")

    def __init__(self, client: ClientInfo) -> None:
        self.client = client
        self.series: list[SeriesDef | ItemError] = []
        self.samples: list[tuple[int, Sample]] = []  # (index in the batch, sample)
        self.span_starts: list[SpanRecord] = []
        self.spans: list[SpanRecord] = []
        self.final = False
        self.errors: list[tuple[str, int, ItemError]] = []
        self.replaced = 0  # strings whose undecodable characters were replaced

    def reject(self, section: str, index: int, err: ItemError) -> None:
        self.errors.append((section, index, err))


# --------------------------------------------------------------------------- scalar checks


# --------------------------------------------------------------------------- decoding
def decode_batch(obj: Any) -> Batch:
    """Validate a parsed JSON batch. Raises BatchError only for a batch that is unusable as a whole."""
    if not isinstance(obj, dict):
        raise BatchError(f"ingest body must be a JSON object, found {type(obj).__name__}")
    version = obj.get("v", PROTOCOL_VERSION)
    if isinstance(version, bool) or version not in PROTOCOL_VERSIONS:
        raise BatchError(f"unsupported ingest protocol version {short_repr(version)}; this server speaks "
                         f"{', '.join(map(str, PROTOCOL_VERSIONS))}")
    strings = TextCleaner()
    batch = Batch(_client_info(obj.get("client"), strings))
    sections = _sections(obj)
    batch.final = obj.get("final") is True
    for entry in sections["series"]:
        try:
            batch.series.append(_series_of(entry, strings))
        except ItemError as err:
            batch.series.append(err)
    n_series = len(batch.series)
    for i, raw in enumerate(sections["samples"]):
        try:
            batch.samples.append((i, _sample(raw, batch.series, n_series)))
        except ItemError as err:
            batch.reject("samples", i, err)
    _decode_spans(batch, sections, version, strings)
    batch.replaced = strings.replaced
    return batch


def _client_info(client: Any, strings: TextCleaner) -> ClientInfo:
    """Who sent the batch: its id (required: it makes cumulative counters idempotent), pid, host, run, rank, and the
    run's description."""
    if not isinstance(client, dict):
        raise BatchError("ingest body needs 'client': {'id': <non-empty string>}: the id makes cumulative counters "
                         "idempotent")
    cid = client.get("id")
    if not isinstance(cid, str) or not cid or len(cid) > MAX_CLIENT_ID:
        raise BatchError(f"'client.id' must be a non-empty string of at most {MAX_CLIENT_ID} characters")
    pid = client.get("pid")
    host = client.get("host")
    project, experiment = client.get("project"), client.get("experiment_name")
    info = ClientInfo(
        strings.clean(cid),
        pid if type(pid) is int and 0 <= pid <= INT64_MAX else None,
        strings.clean(host[:MAX_LABEL_VALUE]) if isinstance(host, str) else "",
        strings.clean(project[:MAX_LABEL_VALUE]) if isinstance(project, str) else None,
        strings.clean(experiment[:MAX_LABEL_VALUE]) if isinstance(experiment, str) else None,
        _namespace(client.get("namespace")),
    )
    rank = client.get("rank")
    if type(rank) is int and 0 <= rank < 2**31:
        info.rank = rank
    if isinstance(client.get("run"), dict):
        info.run_config, info.run_tags = _run_info(client["run"], strings)
    return info


def _sections(obj: dict[str, Any]) -> dict[str, list[Any]]:
    sections = {}
    for sec in ("series", "samples", "span_starts", "spans", "span_attrs"):
        val = obj.get(sec)
        if val is None:
            val = []
        if not isinstance(val, list):
            raise BatchError(f"'{sec}' must be a list, found {type(val).__name__}")
        sections[sec] = val
    return sections


def _decode_spans(batch: Batch, sections: dict[str, list[Any]], version: int, strings: TextCleaner) -> None:
    """Span starts and finished spans, one by one (protocol 2: compact lists whose attributes index the batch's
    table)."""
    table: list[tuple[dict[str, Any], int] | ItemError] = []
    if version == 2:
        for raw in sections["span_attrs"]:
            try:
                table.append(attributes_table_entry(raw, strings))
            except ItemError as err:
                table.append(err)
    for sec, finished in (("span_starts", False), ("spans", True)):
        out = batch.span_starts if not finished else batch.spans
        for i, raw in enumerate(sections[sec]):
            try:
                if version == 2 and isinstance(raw, list):
                    raw = compact_span(raw, table)
                out.append(span_item(raw, finished, strings))
            except ItemError as err:
                batch.reject(sec, i, err)


MAX_RUN_CONFIG_KEYS = 2000
MAX_RUN_CONFIG_BYTES = 256 * 1024
MAX_RUN_TAGS = 64
MAX_RUN_TAG = 128


def _run_info(run: dict[str, Any], strings: TextCleaner) -> tuple[dict[str, Any], list[str]]:
    """The run's config (flat `key: scalar`) and tags. Entries that are not that shape, or past the caps,
    are left out; the run's data never depends on them."""
    config: dict[str, Any] = {}
    size = 0
    raw = run.get("config")
    if isinstance(raw, dict):
        for k, v in raw.items():
            if len(config) >= MAX_RUN_CONFIG_KEYS or size > MAX_RUN_CONFIG_BYTES:
                break
            if not isinstance(k, str) or not k or len(k) > MAX_ATTRIBUTE_KEY:
                continue
            if isinstance(v, str):
                v = strings.clean(v[:MAX_ATTRIBUTE_VALUE])
            elif isinstance(v, bool) or v is None:
                pass
            elif isinstance(v, int):
                v = v if abs(v) <= MAX_EXACT_INT else str(v)
            elif isinstance(v, float):
                v = v if v == v and v not in (float("inf"), float("-inf")) else str(v)
            else:
                continue
            config[strings.clean(k)] = v
            size += len(k) + (len(v) if isinstance(v, str) else 8)
    tags = run.get("tags")
    clean_tags = [strings.clean(t) for t in tags[:MAX_RUN_TAGS] if isinstance(t, str) and 0 < len(t) <= MAX_RUN_TAG] \
        if isinstance(tags, list) else []
    return config, clean_tags


DEFAULT_NAMESPACE = "rl_insight_monitor"
MAX_NAMESPACE = 64


def _namespace(ns: Any) -> str | None:
    """A client's `server.namespace`, if it is a usable metric-name prefix (else the default is used)."""
    if not isinstance(ns, str) or not 0 < len(ns) <= MAX_NAMESPACE or ns == DEFAULT_NAMESPACE:
        return None
    first = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
    if ns[0] not in first or any(c not in first + "0123456789:" for c in ns):
        raise BatchError(f"'client.namespace' {short_repr(ns)} is not a valid metric-name prefix "
                         "([a-zA-Z_][a-zA-Z0-9_:]*)")
    return ns


_SERIES_SEEN: dict[tuple, SeriesDef] = {}
_SERIES_SEEN_MAX = 65_536


def _series_of(entry: Any, strings: TextCleaner) -> SeriesDef:
    """`_series`, remembered: a client defines the series it uses in every batch, the same ones each time, and
    validating them again was a fifth of a batch's intake (bench/RESULTS.md, issue 24). Only definitions that
    validated without a change are remembered (a replaced character is counted on every batch); anything not
    hashable, or not a plain object, is validated as usual. A SeriesDef is never changed after it is made."""
    if type(entry) is not dict:
        return _series(entry, strings)
    labels, bounds = entry.get("l"), entry.get("b")
    try:
        key = (entry.get("k"), entry.get("n"), entry.get("ns"), entry.get("d"),
               tuple(bounds) if type(bounds) is list else bounds,
               tuple(labels.items()) if type(labels) is dict else labels)
        seen = _SERIES_SEEN.get(key)
    except TypeError:  # an unhashable part (a list or an object where a string belongs): the checks will say so
        return _series(entry, strings)
    if seen is not None:
        return seen
    before = strings.replaced
    made = _series(entry, strings)
    if strings.replaced == before:
        if len(_SERIES_SEEN) >= _SERIES_SEEN_MAX:  # a stream of ever-new label sets: start over rather than grow
            _SERIES_SEEN.clear()
        _SERIES_SEEN[key] = made
    return made


def check_series(entry: Any) -> SeriesDef:
    """One series definition as `decode_batch` validates it (ItemError with its reason): for converters that must know
    a series is acceptable before they keep state for it (OTLP delta totals)."""
    return _series(entry, TextCleaner())


def check_value(kind: str, value: Any, n_buckets: int = 0) -> None:
    """A sample's value for a series of `kind` ("gauge" | "counter" | "histogram") as `decode_batch` validates it;
    a histogram's as [sum, count, cumulative counts] over `n_buckets` buckets."""
    if kind == "histogram":
        _histogram_value(value, n_buckets)
    elif kind == "counter":
        finite_float(value, "counter value", 0.0)
    else:
        finite_float(value, "gauge value")


def _series(entry: Any, strings: TextCleaner) -> SeriesDef:
    if not isinstance(entry, dict):
        raise ItemError("invalid_series", f"series entry must be an object, found {type(entry).__name__}")
    k, ns = entry.get("k"), entry.get("ns")
    kind = KINDS.get(k) if isinstance(k, str) else None
    if kind is None:
        raise ItemError("invalid_series", f"series kind must be one of {sorted(KINDS)}, found {short_repr(k)}")
    if not (ns is None or (isinstance(ns, str) and ns in NAMESPACES)):
        raise ItemError("invalid_series", f"unknown namespace {short_repr(ns)}")
    name = entry.get("n")
    if isinstance(name, str) and not name.strip():
        raise ItemError("invalid_metric_name", "metric name must not be blank")
    name = strings.text(name, "metric name", MAX_METRIC_NAME, reason="invalid_metric_name")
    labels = _labels(entry.get("l"), strings)
    doc = entry.get("d")
    doc = strings.clean(doc[:MAX_DOC]) if isinstance(doc, str) else ""
    bounds = None
    if kind == "histogram":
        b = entry.get("b")
        if not isinstance(b, list) or not 0 < len(b) <= MAX_BUCKETS:
            raise ItemError("invalid_series", f"histogram series needs 'b': a list of 1..{MAX_BUCKETS} bucket bounds")
        bounds = tuple(finite_float(x, "bucket bound") for x in b)
        if any(y <= x for x, y in zip(bounds, bounds[1:])):
            raise ItemError("invalid_series", "histogram bucket bounds must be strictly increasing")
    return SeriesDef(kind, name, labels, doc, bounds, ns)


def _labels(raw: Any, strings: TextCleaner) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ItemError("invalid_labels", f"labels must be an object, found {type(raw).__name__}")
    if len(raw) > MAX_LABELS:
        raise ItemError("invalid_labels", f"at most {MAX_LABELS} labels per series, found {len(raw)}")
    out: dict[str, str] = {}
    total = 0
    for k, v in raw.items():
        key = strings.text(k, "label name", MAX_LABEL_NAME, reason="invalid_label_name")
        if isinstance(v, str):
            sv = v
        elif v is None or isinstance(v, (bool, int, float)):
            sv = "None" if v is None else str(v) if not (type(v) is int and abs(v) > INT64_MAX) else short_repr(v)
        else:
            raise ItemError("invalid_label_value", f"label {key!r} must be a scalar, found {type(v).__name__}")
        if len(sv) > MAX_LABEL_VALUE:
            raise ItemError("too_long", f"label {key!r} value is {len(sv)} characters; at most {MAX_LABEL_VALUE}")
        total += len(key) + len(sv)
        if total > MAX_LABELS_BYTES:
            raise ItemError("too_long", f"labels of one series exceed {MAX_LABELS_BYTES} characters together")
        out[key] = strings.clean(sv)
    return out


def _sample(raw: Any, series: list[SeriesDef | ItemError], n: int) -> Sample:
    if type(raw) is not list or len(raw) != 4:
        raise ItemError("invalid_sample", "sample must be [series_index, timestamp_s, step, value]")
    idx, ts, step, value = raw
    if type(idx) is not int or not 0 <= idx < n:
        raise ItemError("invalid_sample", f"series index {short_repr(idx)} is not in 0..{n - 1}")
    ref = series[idx]
    if isinstance(ref, ItemError):
        raise ref
    ts_f = finite_float(ts, "timestamp (s)", 0.0, MAX_TS_S)
    step_f = None if step is None else finite_float(step, "step", -MAX_EXACT_INT, MAX_EXACT_INT)
    if ref.kind == "histogram":
        value = _histogram_value(value, len(ref.bounds or ()) + 1)
    elif ref.kind == "counter":
        value = finite_float(value, "counter value", 0.0)
    else:
        value = finite_float(value, "gauge value")
    return Sample(idx, ts_f, step_f, value)


def _histogram_value(value: Any, n: int) -> tuple[float, int, tuple[int, ...]]:
    if not (isinstance(value, list) and len(value) == 3 and isinstance(value[2], list) and len(value[2]) == n):
        raise ItemError("invalid_value", f"histogram value must be [sum, count, [{n} cumulative bucket counts]]")
    total = finite_float(value[0], "histogram sum")
    count = value[1]
    if type(count) is float and count.is_integer():
        count = int(count)
    if type(count) is not int or not 0 <= count <= MAX_EXACT_INT:
        raise ItemError("out_of_range", f"histogram count must be an integer in [0, 2^53], found {short_repr(count)}")
    cum = value[2]
    if not all(type(c) is int and 0 <= c <= MAX_EXACT_INT for c in cum):
        raise ItemError("out_of_range", "histogram bucket counts must be integers in [0, 2^53]")
    if any(b < a for a, b in zip(cum, cum[1:])) or cum[-1] != count:
        raise ItemError("invalid_value", "histogram bucket counts must be cumulative and end at the total count")
    return total, count, tuple(cum)

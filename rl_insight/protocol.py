"""The wire contract between the training client and the ingest server: one home for it.

Stdlib only and free of `re`, `dataclasses` and `typing` at import time, because training processes
import it (through the client) on every start.

A batch (``POST /api/v1/ingest``, JSON, optionally gzip)::

    {"v": 1, "client": {"id", "pid", "host", "project"?, "experiment_name"?},
     "series": [{"k": "g"|"c"|"h", "n": name, "l": {labels}, "d": doc, "b": [bounds]?, "ns": "client"?}],
     "samples": [[series_index, unix_ts_s, step|null, value]],   # histogram value: [sum, count, [cumulative counts]]
     "span_starts": [{"id", "trace_id", "parent_id", "name", "lane", "start_ns", "kind", "attributes"}],
     "spans": [{... the same ..., "end_ns"}],
     "final": true?}                                              # the process is done (finish / exit)

Protocol 2 is the same plus a per-batch attribute table, so that the attributes spans share (every
state of a lane carries the same ones) are sent and validated once per batch::

     "span_attrs": [{attributes}, ...],
     "span_starts" / "spans": [[id, trace_id, parent_id|null, name, lane|null, start_ns, end_ns|null, kind, attrs_index]]

A client sends 1 until an ingest answer lists 2 in `protocols` (a newer client never breaks an older server).

`decode_batch` is the one validation at the boundary. It never raises for a bad *item*: the item is
dropped and reported (section, index, reason) and the rest of the batch is kept. What it returns is
guaranteed to fit every sink: strings are valid UTF-8 (undecodable characters are replaced and the
replacements counted), numbers are finite and inside the ranges SQLite, Prometheus and OTLP hold,
and sizes are capped.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROTOCOL_VERSION = 1  # what a client speaks until the server says more
PROTOCOL_VERSIONS = (1, 2)  # what this server accepts (sent back in every ingest answer as `protocols`)

# Routes (the client and the server both use these constants).
ROUTE_INGEST = "/api/v1/ingest"
ROUTE_TARGETS = "/api/v1/prometheus/targets"

# Series kinds on the wire and their names.
KIND_GAUGE, KIND_COUNTER, KIND_HISTOGRAM = "g", "c", "h"
KINDS = {KIND_GAUGE: "gauge", KIND_COUNTER: "counter", KIND_HISTOGRAM: "histogram"}
NAMESPACES = (None, "client")  # None: trainer scalars; "client": the client's own delivery metrics

# Limits. The server enforces them; the client respects them so that it never sends what is refused.
INT64_MAX = 2**63 - 1
MAX_EXACT_INT = 2**53  # counts and steps beyond this cannot be represented exactly as floats
MAX_TS_S = INT64_MAX / 1e9  # client timestamps (s) must fit epoch nanoseconds in int64 (year 2262)
MAX_METRIC_NAME = 256
MAX_SPAN_NAME = 1024
MAX_LANE = 256
MAX_ID = 32
MAX_KIND = 32
MAX_LABELS = 64
MAX_LABEL_NAME = 128
MAX_LABEL_VALUE = 2048
MAX_LABELS_BYTES = 8192  # all names and values of one series together
MAX_DOC = 512
MAX_BUCKETS = 64
MAX_ATTRIBUTES = 128
MAX_ATTRIBUTE_KEY = 256
MAX_ATTRIBUTE_VALUE = 4096  # longer string values are truncated (marked with "…")
MAX_ATTRIBUTES_BYTES = 16384
MAX_CLIENT_ID = 64
MAX_ERRORS_REPORTED = 100

SPAN_KINDS = ("state", "state_child", "op", "span")


class ItemError(ValueError):
    """One invalid item of a batch; `reason` is a short machine-readable key counted by the server."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class BatchError(ValueError):
    """The batch as a whole cannot be used (wrong shape or version): answered with one 4xx."""


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


class SpanRecord:
    """A span start (end_ns None) or a finished span. `size` estimates its memory in bytes."""

    __slots__ = ("id", "trace_id", "parent_id", "name", "lane", "kind", "start_ns", "end_ns", "attributes", "size")

    def __init__(self, id: str, trace_id: str, parent_id: str | None, name: str, lane: str | None, kind: str,
                 start_ns: int, end_ns: int | None, attributes: dict[str, Any], size: int = 0) -> None:
        self.id = id
        self.trace_id = trace_id
        self.parent_id = parent_id
        self.name = name
        self.lane = lane
        self.kind = kind
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.attributes = attributes
        self.size = size

    @property
    def project(self) -> str:
        v = self.attributes.get("project")
        return v if isinstance(v, str) else ""

    @property
    def experiment_name(self) -> str:
        v = self.attributes.get("experiment_name")
        return v if isinstance(v, str) else ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "trace_id": self.trace_id, "parent_id": self.parent_id, "name": self.name,
                "lane": self.lane, "kind": self.kind, "start_ns": self.start_ns, "end_ns": self.end_ns,
                "attributes": self.attributes}


class ClientInfo:
    __slots__ = ("id", "pid", "host", "project", "experiment_name", "namespace", "run_config", "run_tags")

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
def is_number(x: object) -> bool:
    return (type(x) is int or type(x) is float) and not isinstance(x, bool)


def finite_float(x: object, what: str, lo: float = -1.7976931348623157e308, hi: float = 1.7976931348623157e308) -> float:
    """x as a finite float in [lo, hi]; ItemError naming `what` otherwise (also for ints past float range)."""
    if type(x) is float and lo <= x <= hi:  # fast path (NaN fails the comparison)
        return x
    if type(x) is int:
        if lo <= x <= hi:  # type: ignore[operator]
            return float(x)
        raise ItemError("out_of_range", f"{what} must be in [{lo:g}, {hi:g}], found {_short(x)}")
    if not is_number(x):
        raise ItemError("invalid_value", f"{what} must be a number, found {_short(x)}")
    try:
        f = float(x)  # type: ignore[arg-type]
    except OverflowError:
        raise ItemError("out_of_range", f"{what} {_short(x)} is beyond the float range") from None
    if f != f or f in (float("inf"), float("-inf")):
        raise ItemError("non_finite", f"{what} must be finite, found {f!r}")
    if not lo <= f <= hi:
        raise ItemError("out_of_range", f"{what} must be in [{lo:g}, {hi:g}], found {f!r}")
    return f


def epoch_ns(x: object, what: str) -> int:
    """A non-negative integer that fits int64 (SQLite INTEGER, OTLP fixed64 nanoseconds)."""
    if type(x) is not int:
        raise ItemError("invalid_span", f"{what} must be an integer (epoch ns), found {_short(x)}")
    if not 0 <= x <= INT64_MAX:  # type: ignore[operator]
        raise ItemError("out_of_range", f"{what} must be in [0, 2^63-1], found {_short(x)}")
    return x  # type: ignore[return-value]


def _short(x: object) -> str:
    try:
        r = repr(x)
    except Exception:  # pragma: no cover - repr of decoded JSON never fails, but be safe
        r = f"<{type(x).__name__}>"
    return r if len(r) <= 60 else r[:57] + "..."


class _Strings:
    """Cleans strings to valid UTF-8 and counts how many needed it."""

    __slots__ = ("replaced",)

    def __init__(self) -> None:
        self.replaced = 0

    def clean(self, s: str) -> str:
        try:
            s.encode("utf-8")
            return s
        except UnicodeEncodeError:  # lone surrogates (e.g. os.fsdecode of undecodable bytes)
            self.replaced += 1
            return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in s)

    def text(self, x: object, what: str, max_len: int, *, empty_ok: bool = False, reason: str = "invalid_name") -> str:
        if not isinstance(x, str):
            raise ItemError(reason, f"{what} must be a string, found {type(x).__name__}")
        if not x and not empty_ok:
            raise ItemError(reason, f"{what} must not be empty")
        if len(x) > max_len:
            raise ItemError("too_long", f"{what} is {len(x)} characters; at most {max_len}")
        return self.clean(x)


def clean_text(s: str) -> str:
    """A string made valid UTF-8 (lone surrogates replaced with U+FFFD)."""
    return _Strings().clean(s)


# --------------------------------------------------------------------------- decoding
def decode_batch(obj: Any) -> Batch:
    """Validate a parsed JSON batch. Raises BatchError only for a batch that is unusable as a whole."""
    if not isinstance(obj, dict):
        raise BatchError(f"ingest body must be a JSON object, found {type(obj).__name__}")
    version = obj.get("v", PROTOCOL_VERSION)
    if isinstance(version, bool) or version not in PROTOCOL_VERSIONS:
        raise BatchError(f"unsupported ingest protocol version {_short(version)}; this server speaks "
                         f"{', '.join(map(str, PROTOCOL_VERSIONS))}")
    strings = _Strings()
    client = obj.get("client")
    if not isinstance(client, dict):
        raise BatchError("ingest body needs 'client': {'id': <non-empty string>}: the id makes cumulative counters idempotent")
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
    if isinstance(client.get("run"), dict):
        info.run_config, info.run_tags = _run_info(client["run"], strings)
    sections = {}
    for sec in ("series", "samples", "span_starts", "spans", "span_attrs"):
        val = obj.get(sec)
        if val is None:
            val = []
        if not isinstance(val, list):
            raise BatchError(f"'{sec}' must be a list, found {type(val).__name__}")
        sections[sec] = val
    batch = Batch(info)
    batch.final = obj.get("final") is True
    for entry in sections["series"]:
        try:
            batch.series.append(_series(entry, strings))
        except ItemError as err:
            batch.series.append(err)
    n_series = len(batch.series)
    for i, raw in enumerate(sections["samples"]):
        try:
            batch.samples.append((i, _sample(raw, batch.series, n_series)))
        except ItemError as err:
            batch.reject("samples", i, err)
    table: list[tuple[dict[str, Any], int] | ItemError] = []
    if version == 2:
        for raw in sections["span_attrs"]:
            try:
                table.append(_attributes(raw, strings))
            except ItemError as err:
                table.append(err)
    for sec, finished in (("span_starts", False), ("spans", True)):
        out = batch.span_starts if not finished else batch.spans
        for i, raw in enumerate(sections[sec]):
            try:
                if version == 2 and isinstance(raw, list):
                    raw = _compact_span(raw, table)
                out.append(_span(raw, finished, strings))
            except ItemError as err:
                batch.reject(sec, i, err)
    batch.replaced = strings.replaced
    return batch


MAX_RUN_CONFIG_KEYS = 2000
MAX_RUN_CONFIG_BYTES = 256 * 1024
MAX_RUN_TAGS = 64
MAX_RUN_TAG = 128


def _run_info(run: dict[str, Any], strings: _Strings) -> tuple[dict[str, Any], list[str]]:
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
        raise BatchError(f"'client.namespace' {_short(ns)} is not a valid metric-name prefix ([a-zA-Z_][a-zA-Z0-9_:]*)")
    return ns


def _series(entry: Any, strings: _Strings) -> SeriesDef:
    if not isinstance(entry, dict):
        raise ItemError("invalid_series", f"series entry must be an object, found {type(entry).__name__}")
    k, ns = entry.get("k"), entry.get("ns")
    kind = KINDS.get(k) if isinstance(k, str) else None
    if kind is None:
        raise ItemError("invalid_series", f"series kind must be one of {sorted(KINDS)}, found {_short(k)}")
    if not (ns is None or (isinstance(ns, str) and ns in NAMESPACES)):
        raise ItemError("invalid_series", f"unknown namespace {_short(ns)}")
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


def _labels(raw: Any, strings: _Strings) -> dict[str, str]:
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
            sv = "None" if v is None else str(v) if not (type(v) is int and abs(v) > INT64_MAX) else _short(v)
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
        raise ItemError("invalid_sample", f"series index {_short(idx)} is not in 0..{n - 1}")
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
        raise ItemError("out_of_range", f"histogram count must be an integer in [0, 2^53], found {_short(count)}")
    cum = value[2]
    if not all(type(c) is int and 0 <= c <= MAX_EXACT_INT for c in cum):
        raise ItemError("out_of_range", "histogram bucket counts must be integers in [0, 2^53]")
    if any(b < a for a, b in zip(cum, cum[1:])) or cum[-1] != count:
        raise ItemError("invalid_value", "histogram bucket counts must be cumulative and end at the total count")
    return total, count, tuple(cum)


def _span(item: Any, finished: bool, strings: _Strings) -> SpanRecord:
    if not isinstance(item, dict):
        raise ItemError("invalid_span", f"span must be an object, found {type(item).__name__}")
    sid = strings.text(item.get("id"), "span 'id'", MAX_ID, reason="invalid_span")
    name = strings.text(item.get("name"), "span 'name'", MAX_SPAN_NAME, reason="invalid_span")
    start = epoch_ns(item.get("start_ns"), "span 'start_ns'")
    end = None
    if finished:
        end = epoch_ns(item.get("end_ns"), "span 'end_ns'")
        if end < start:
            raise ItemError("invalid_span", f"span 'end_ns' ({end}) is before 'start_ns' ({start})")
    trace = item.get("trace_id")
    trace_id = strings.text(trace, "span 'trace_id'", MAX_ID, reason="invalid_span") if trace else sid
    parent = item.get("parent_id")
    parent_id = strings.text(parent, "span 'parent_id'", MAX_ID, reason="invalid_span") if parent else None
    attrs, size = _attributes(item.get("attributes"), strings)
    lane = item.get("lane")
    if lane is None:
        lane = attrs.get("state_lane_id")
    if lane is not None:
        lane = strings.clean(lane if isinstance(lane, str) else str(lane))
        if len(lane) > MAX_LANE:
            raise ItemError("too_long", f"span 'lane' is {len(lane)} characters; at most {MAX_LANE}")
    kind = item.get("kind")
    kind = kind if isinstance(kind, str) and 0 < len(kind) <= MAX_KIND else "span"
    size += len(sid) + len(name) + len(trace_id) + len(lane or "") + 200
    return SpanRecord(sid, trace_id, parent_id, name, lane, strings.clean(kind), start, end, attrs, size)


class _Resolved:
    """Attributes already validated (from the protocol-2 table): shared, not validated again per span."""

    __slots__ = ("attrs", "size")

    def __init__(self, attrs: dict[str, Any], size: int) -> None:
        self.attrs = attrs
        self.size = size


def _compact_span(raw: list, table: list) -> dict[str, Any]:
    if len(raw) != 9:
        raise ItemError("invalid_span", "compact span must be [id, trace_id, parent_id, name, lane, start_ns, end_ns, kind, attrs_index]")
    sid, trace, parent, name, lane, start, end, kind, ai = raw
    if ai is None:
        attrs: Any = None
    else:
        if type(ai) is not int or not 0 <= ai < len(table):
            raise ItemError("invalid_span", f"attrs index {_short(ai)} is not in 0..{len(table) - 1}")
        entry = table[ai]
        if isinstance(entry, ItemError):
            raise entry
        attrs = _Resolved(*entry)
    return {"id": sid, "trace_id": trace, "parent_id": parent, "name": name, "lane": lane, "start_ns": start,
            "end_ns": end, "kind": kind, "attributes": attrs}


def _attributes(raw: Any, strings: _Strings) -> tuple[dict[str, Any], int]:
    if isinstance(raw, _Resolved):
        return raw.attrs, raw.size
    if raw is None:
        return {}, 0
    if not isinstance(raw, dict):
        raise ItemError("invalid_span", f"span 'attributes' must be an object, found {type(raw).__name__}")
    if len(raw) > MAX_ATTRIBUTES:
        raise ItemError("too_large", f"span has {len(raw)} attributes; at most {MAX_ATTRIBUTES}")
    out: dict[str, Any] = {}
    size = 0
    for k, v in raw.items():
        key = strings.text(k, "attribute name", MAX_ATTRIBUTE_KEY, reason="invalid_span")
        val = _attribute_value(v, strings)
        size += len(key) + (len(val) if isinstance(val, str) else 16)
        if size > MAX_ATTRIBUTES_BYTES:
            raise ItemError("too_large", f"span attributes exceed {MAX_ATTRIBUTES_BYTES} characters together")
        out[key] = val
    return out, size


def _attribute_value(v: Any, strings: _Strings) -> Any:
    """Scalars OTLP can carry: str, bool, int64, finite float; anything else becomes a string."""
    if isinstance(v, bool) or v is None:
        return v
    if type(v) is int:
        return v if -INT64_MAX - 1 <= v <= INT64_MAX else str(v)[:MAX_ATTRIBUTE_VALUE]
    if type(v) is float:
        return v if v == v and v not in (float("inf"), float("-inf")) else str(v)
    if isinstance(v, str):
        s = v if len(v) <= MAX_ATTRIBUTE_VALUE else v[: MAX_ATTRIBUTE_VALUE - 1] + "…"
        return strings.clean(s)
    # lists / objects: kept as their JSON text, bounded (OTLP attributes are flat)
    import json

    try:
        text = json.dumps(v, default=str, ensure_ascii=False)
    except (ValueError, RecursionError):
        text = f"<{type(v).__name__}>"
    if len(text) > MAX_ATTRIBUTE_VALUE:
        text = text[: MAX_ATTRIBUTE_VALUE - 1] + "…"
    return strings.clean(text)


# --------------------------------------------------------------------------- profile requests
# Control rides on replies: every ingest answer of a server that profiles carries `profile`, the list of
# the client's run's active requests (ProfileRequest.to_wire); a client matches them to its identity
# (lanes, role, rank) and reports back on ROUTE_PROFILES/<id>/status, uploading its trace in chunks to
# ROUTE_PROFILES/<id>/upload/<file name>?offset=&total= (409 with the server's `size` to resume elsewhere).
ROUTE_PROFILES = "/api/v1/profiles"
PROFILE_TOOLS = ("torch",)
PROFILE_ACTIVITIES = ("cpu", "cuda")
MAX_PROFILE_STEPS = 8  # steps in one window
MAX_PROFILE_WINDOW_S = 900.0  # a window still open after this is closed by the client
DEFAULT_PROFILE_BYTES = 256 * 2**20  # gzip'd trace size cap per process
MAX_PROFILE_BYTES = 2 * 2**30
PROFILE_CHUNK_BYTES = 2**20
MAX_PROFILE_CHUNK_BYTES = 8 * 2**20
MAX_PROFILE_SELECTORS = 256
CLIENT_HEARTBEAT_S = 10.0  # an idle client still sends this often: the longest a process may take to hear a request
# what a process reports about a request (status route); terminal ones end its part of the request
PROCESS_STATES = ("armed", "profiling", "uploading", "uploaded", "failed", "unsupported", "cancelled", "busy", "expired")
PROCESS_TERMINAL = ("uploaded", "failed", "unsupported", "cancelled", "busy", "expired")


def parse_steps(text: str) -> tuple[int, int]:
    """`120` or `120-121` as (first, last), the one grammar of profile steps (the CLI, the route, the UI's field);
    ValueError naming the problem otherwise. No `re`: the client imports this module."""
    first_s, sep, last_s = text.strip().partition("-")
    first_s, last_s = first_s.strip(), last_s.strip()
    if not (first_s.isdigit() and first_s.isascii() and len(first_s) <= 15) or \
            (sep and not (last_s.isdigit() and last_s.isascii() and len(last_s) <= 15)):
        raise ValueError(f"steps {text[:40]!r}: give one step (120) or a range (120-121)")
    first = int(first_s)
    return first, int(last_s) if sep else first


class ProfileRequest:
    """What to profile: steps first..last of one run (or, with `stage`, that state of one step), on the processes
    whose lanes, role or rank match (no selector: every process of the run), with which options, until when."""

    __slots__ = ("id", "project", "experiment_name", "first_step", "last_step", "lanes", "roles", "ranks", "tool",
                 "activities", "memory", "stack", "expires_at", "max_window_s", "max_bytes", "stage")

    def __init__(self, id: str, project: str, experiment_name: str, first_step: int, last_step: int,
                 lanes: tuple[str, ...] = (), roles: tuple[str, ...] = (), ranks: tuple[int, ...] = (),
                 tool: str = "torch", activities: tuple[str, ...] = ("cpu", "cuda"), memory: bool = False,
                 stack: bool = False, expires_at: float = 0.0, max_window_s: float = 300.0,
                 max_bytes: int = DEFAULT_PROFILE_BYTES, stage: str = "") -> None:
        self.id = id
        self.project = project
        self.experiment_name = experiment_name
        self.first_step = first_step
        self.last_step = last_step
        self.lanes = lanes
        self.roles = roles
        self.ranks = ranks
        self.tool = tool
        self.activities = activities
        self.memory = memory
        self.stack = stack
        self.expires_at = expires_at
        self.max_window_s = max_window_s
        self.max_bytes = max_bytes
        self.stage = stage  # "" = the whole step(s); else the window is that state (trace_state name) of the step

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "project": self.project, "experiment_name": self.experiment_name,
                "steps": [self.first_step, self.last_step], "lanes": list(self.lanes), "roles": list(self.roles),
                "ranks": list(self.ranks), "tool": self.tool, "activities": list(self.activities), "memory": self.memory,
                "stack": self.stack, "expires_at": self.expires_at, "max_window_s": self.max_window_s,
                "max_bytes": self.max_bytes, "stage": self.stage}

    @classmethod
    def from_wire(cls, d: Any) -> "ProfileRequest":
        """Validated; ValueError naming the problem otherwise (a client ignores such an entry)."""
        if not isinstance(d, dict):
            raise ValueError("a profile request must be an object")
        rid = d.get("id")
        if not isinstance(rid, str) or not 1 <= len(rid) <= MAX_ID or not all(c in "0123456789abcdef" for c in rid):
            raise ValueError("profile request id must be 1-32 lowercase hex digits")
        steps = d.get("steps")
        if not (isinstance(steps, list) and len(steps) == 2 and all(type(s) is int and 0 <= s <= MAX_EXACT_INT for s in steps)
                and steps[0] <= steps[1] and steps[1] - steps[0] < MAX_PROFILE_STEPS):
            raise ValueError(f"steps must be [first, last] with first <= last, at most {MAX_PROFILE_STEPS} steps")
        strings = _Strings()

        def texts(key: str, max_len: int) -> tuple[str, ...]:
            v = d.get(key) or []
            if not isinstance(v, list) or len(v) > MAX_PROFILE_SELECTORS:
                raise ValueError(f"{key} must be a list of at most {MAX_PROFILE_SELECTORS}")
            return tuple(strings.text(x, key, max_len) for x in v)

        ranks = d.get("ranks") or []
        if not isinstance(ranks, list) or len(ranks) > MAX_PROFILE_SELECTORS or \
                not all(type(r) is int and 0 <= r <= INT64_MAX for r in ranks):
            raise ValueError("ranks must be a list of non-negative integers")
        activities = texts("activities", 16)
        if not activities or any(a not in PROFILE_ACTIVITIES for a in activities):
            raise ValueError(f"activities must be some of {', '.join(PROFILE_ACTIVITIES)}")
        tool = d.get("tool", "torch")
        if tool not in PROFILE_TOOLS:
            raise ValueError(f"tool must be one of {', '.join(PROFILE_TOOLS)}")
        try:
            expires_at = finite_float(d.get("expires_at", 0.0), "expires_at", 0.0, MAX_TS_S)
            window = finite_float(d.get("max_window_s", 300.0), "max_window_s", 1.0, MAX_PROFILE_WINDOW_S)
            max_bytes = finite_float(d.get("max_bytes", DEFAULT_PROFILE_BYTES), "max_bytes", 1.0, MAX_PROFILE_BYTES)
            project = strings.text(d.get("project"), "project", MAX_LABEL_VALUE)
            experiment = strings.text(d.get("experiment_name"), "experiment_name", MAX_LABEL_VALUE)
            lanes, roles = texts("lanes", MAX_LANE), texts("roles", MAX_LABEL_VALUE)
            stage = strings.text(d.get("stage") or "", "stage", MAX_SPAN_NAME, empty_ok=True)
        except ItemError as exc:
            raise ValueError(str(exc)) from None
        if stage and steps[0] != steps[1]:
            raise ValueError("a stage is profiled in one step: give steps [N, N]")
        return cls(rid, project, experiment, steps[0], steps[1], lanes, roles, tuple(ranks), tool, activities,
                   d.get("memory") is True, d.get("stack") is True, expires_at, window, int(max_bytes), stage)

    def matches(self, lanes: Any, roles: Any, rank: int | None) -> bool:
        """Whether a process with these lanes, roles and rank is asked (any selector that matches)."""
        if not (self.lanes or self.roles or self.ranks):
            return True
        norm = {r.replace("-", "_") for r in roles}
        return bool(set(self.lanes) & set(lanes)) or any(r.replace("-", "_") in norm for r in self.roles) or \
            (rank is not None and rank in self.ranks)

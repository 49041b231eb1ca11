"""A batch's spans: the `SpanRecord` every sink takes, and the one validation of a span item (protocol 1's object,
protocol 2's compact array with its attributes from the batch's table). Like the rest of `decode_batch`, a bad item
raises ItemError (dropped and reported by the caller), and what it returns fits every sink: text cleaned, sizes
capped, times in range.
"""

from __future__ import annotations

from .limits import (
    INT64_MAX,
    MAX_ATTRIBUTE_KEY,
    MAX_ATTRIBUTE_VALUE,
    MAX_ATTRIBUTES,
    MAX_ATTRIBUTES_BYTES,
    MAX_ID,
    MAX_KIND,
    MAX_LANE,
    MAX_SPAN_NAME,
)
from .values import ItemError, TextCleaner, epoch_ns, short_repr

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


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

    def __reduce__(self) -> tuple:
        # pickled as the constructor's arguments, not as a dict of its slots (the server hands spans to its run store
        # writer process by the thousand a second; about half the time both ways)
        return SpanRecord, (self.id, self.trace_id, self.parent_id, self.name, self.lane, self.kind, self.start_ns,
                            self.end_ns, self.attributes, self.size)

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


def span_item(item: Any, finished: bool, strings: TextCleaner) -> SpanRecord:
    """A span item of protocol 1 (or a compact one resolved by `compact_span`) as a SpanRecord; ItemError."""
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
    attrs, size = attributes_table_entry(item.get("attributes"), strings)
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


def compact_span(raw: list, table: list) -> dict[str, Any]:
    if len(raw) != 9:
        raise ItemError("invalid_span", "compact span must be [id, trace_id, parent_id, name, lane, start_ns, "
                                        "end_ns, kind, attrs_index]")
    sid, trace, parent, name, lane, start, end, kind, ai = raw
    if ai is None:
        attrs: Any = None
    else:
        if type(ai) is not int or not 0 <= ai < len(table):
            raise ItemError("invalid_span", f"attrs index {short_repr(ai)} is not in 0..{len(table) - 1}")
        entry = table[ai]
        if isinstance(entry, ItemError):
            raise entry
        attrs = _Resolved(*entry)
    return {"id": sid, "trace_id": trace, "parent_id": parent, "name": name, "lane": lane, "start_ns": start,
            "end_ns": end, "kind": kind, "attributes": attrs}


def attributes_table_entry(raw: Any, strings: TextCleaner) -> tuple[dict[str, Any], int]:
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


def _attribute_value(v: Any, strings: TextCleaner) -> Any:
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

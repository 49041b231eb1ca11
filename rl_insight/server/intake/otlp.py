"""OTLP trace intake: spans from any OpenTelemetry exporter (verl's MLflow rollout traces, vLLM's
`--otlp-traces-endpoint`, the OTel SDK) become the same span records as our own ingest.

`POST /v1/traces` takes OTLP/HTTP protobuf or JSON, gzip'd or not (routes/otlp.py). Each span is mapped
to a run and a lane, then goes through `protocol.decode_batch` (the one validation) and the same sinks as
ingested spans (memory, run store, Tempo forwarder).

* **Run identity**, in this order: the span's attributes `project` + `experiment_name`; the resource's;
  a `service.name` written `<project>/<experiment_name>`. A span with none of these is kept in a visible
  run of project `unassigned` (experiment: its service.name, else `unknown`), never dropped silently.
* **Lane**: the `state_lane_id` attribute, else `otlp/<service.name>`.
* **States**: a span stands for its lane's state (kind `state`: counted in the step views, the critical path and
  the bubbles like our own states) when it is top-level in its process: it has no parent, its parent is remote
  (the OTLP `flags` say so: another service started the trace), or it names its lane (`state_lane_id`). A span
  under a local parent is kind `span`: its parent already covers its time, so counting it again would double it.
* **Bounded**: attribute values longer than protocol.MAX_ATTRIBUTE_VALUE (prompt text) are cut and, past
  protocol.MAX_ATTRIBUTES_BYTES per span, the largest values are replaced by a marker; both are counted
  (`capped`), so a span is never refused for its size. Resource attributes are prefixed `resource.`.
* **Memory in proportion to what is kept**: a protobuf request is walked span by span (never converted
  whole to dicts, which cost ~85x the body); attributes per span, values per array or list, nesting depth
  and leaves per span are capped during the walk, and at most MAX_SPANS_PER_REQUEST spans of one request
  are kept (the rest are refused and counted in the answer's partial success).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Iterator

from ...errors import MalformedBodyError
from ...protocol import MAX_ATTRIBUTE_VALUE, MAX_ATTRIBUTES, MAX_ATTRIBUTES_BYTES, MAX_SPAN_NAME

UNASSIGNED = "unassigned"
_RESOURCE_KEEP = ("service.name", "service.instance.id", "host.name", "process.pid", "telemetry.sdk.name")
MAX_SPANS_PER_REQUEST = 20_000  # an SDK's batch is 512; more in one request are refused, counted
MAX_VALUES = 256  # values of one array or key-value list attribute
MAX_DEPTH = 8  # nesting of array / key-value list attributes
_PARENT_IS_REMOTE = 0x100 | 0x200  # SpanFlags: CONTEXT_HAS_IS_REMOTE and CONTEXT_IS_REMOTE (OTLP 1.1)
MAX_LEAVES = 4096  # values of all of one span's attributes together, nested ones included


class _Budget:
    """Leaves left for one span's (or resource's) attributes: a request of millions of tiny nested values
    costs at most MAX_LEAVES values per span."""

    __slots__ = ("left", "capped")

    def __init__(self) -> None:
        self.left, self.capped = MAX_LEAVES, 0

    def take(self) -> bool:
        if self.left <= 0:
            self.capped += 1
            return False
        self.left -= 1
        return True


def _list(v: Any) -> list[Any]:
    """A JSON field that must be a list (anything else, an object included, counts as absent)."""
    return v if isinstance(v, list) else []


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _any_value(v: Any, budget: _Budget, depth: int = 0) -> Any:
    """An OTLP/JSON AnyValue as a plain Python value, within the span's budget."""
    if not isinstance(v, dict) or not budget.take():
        return None
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in v:
            x = v[key]
            return x if isinstance(x, (str, bool, int, float)) else None
    if "intValue" in v:
        try:
            return int(v["intValue"])  # JSON carries int64 as a string
        except (TypeError, ValueError):
            return str(v["intValue"])[:64]
    if depth >= MAX_DEPTH:
        return None
    if "arrayValue" in v:
        return [_any_value(x, budget, depth + 1) for x in _list(_dict(v["arrayValue"]).get("values"))[:MAX_VALUES]]
    if "kvlistValue" in v:
        return {str(kv.get("key"))[:256]: _any_value(kv.get("value"), budget, depth + 1)
                for kv in _list(_dict(v["kvlistValue"]).get("values"))[:MAX_VALUES] if isinstance(kv, dict)}
    if "bytesValue" in v:
        return str(v["bytesValue"])[:MAX_ATTRIBUTE_VALUE]
    return None


def _attrs(items: Any, budget: _Budget | None = None) -> dict[str, Any]:
    budget = budget or _Budget()
    out: dict[str, Any] = {}
    items = _list(items)
    budget.capped += max(0, len(items) - MAX_ATTRIBUTES * 4)  # never read: counted as capped
    for kv in items[: MAX_ATTRIBUTES * 4]:
        if isinstance(kv, dict) and isinstance(kv.get("key"), str):
            out[kv["key"]] = _any_value(kv.get("value"), budget)
    return _mlflow(out)


def _pb_value(v: Any, budget: _Budget, depth: int = 0) -> Any:
    """A protobuf AnyValue as a plain Python value, read field by field within the budget."""
    if not budget.take():
        return None
    which = v.WhichOneof("value")
    if which in ("string_value", "bool_value", "int_value", "double_value"):
        return getattr(v, which)
    if which == "bytes_value":
        import base64

        return base64.b64encode(v.bytes_value[:MAX_ATTRIBUTE_VALUE]).decode()
    if depth >= MAX_DEPTH:
        return None
    if which == "array_value":
        return [_pb_value(x, budget, depth + 1) for x in v.array_value.values[:MAX_VALUES]]
    if which == "kvlist_value":
        return {kv.key[:256]: _pb_value(kv.value, budget, depth + 1) for kv in v.kvlist_value.values[:MAX_VALUES]}
    return None


def _pb_attrs(items: Any, budget: _Budget) -> dict[str, Any]:
    budget.capped += max(0, len(items) - MAX_ATTRIBUTES * 4)  # never read: counted as capped
    return _mlflow({kv.key: _pb_value(kv.value, budget) for kv in items[: MAX_ATTRIBUTES * 4]})


# verl's rollout-trace tags (`rollout_trace_attr`), as MLflow would export trace tags: `mlflow.traceTag.<key>`
VERL_TRACE_TAGS = ("step", "sample_index", "rollout_n", "validate", "experiment_name", "project")


def _mlflow(attrs: dict[str, Any]) -> dict[str, Any]:
    """MLflow's OTLP export writes its string attributes JSON-encoded (`"\"tr-…\""`) and trace tags as
    `mlflow.traceTag.<key>`: unquote the former; copy verl's tags to their plain names (docs/otlp.md)."""
    if not any(k.startswith("mlflow.") for k in attrs):
        return attrs
    for k, v in list(
        attrs.items()
    ):  # MLflow encodes every attribute it sets, its own and the user's (span.set_attribute)
        if isinstance(v, str) and len(v) >= 2 and v[0] == '"' and v[-1] == '"':
            try:
                attrs[k] = v = json.loads(v)
            except ValueError:
                pass
        if k.startswith("mlflow.traceTag.") and k[16:] in VERL_TRACE_TAGS and k[16:] not in attrs:
            attrs[k[16:]] = v
    for key, derive in (("mlflow.spanInputs", _INPUT_FACTS), ("mlflow.spanOutputs", _OUTPUT_FACTS)):
        if key in attrs:
            _derive(attrs, attrs[key], derive)
    return attrs


def _finite(v: Any) -> float:
    f = float(v)
    if f - f != 0.0 or abs(f) > 2**53:  # the protocol refuses a span with a value SQLite/OTLP cannot hold
        raise ValueError(v)
    return f


# What the trajectory view needs from verl's traced calls, read from the full inputs/outputs before they are
# capped (prompt_ids alone outgrow the cap): `generate(request_id, prompt_ids=…)` → TokenOutput(token_ids,
# stop_reason); `AgentLoop.run` → AgentLoopOutput(num_turns, reward_score).
# (verl's `request_id` is the trajectory's sticky-session id, the same for all its turns, not vLLM's request id)
_INPUT_FACTS = {"request_id": ("verl.request_id", str), "prompt_ids": ("gen_ai.usage.prompt_tokens", len)}
_OUTPUT_FACTS = {"token_ids": ("gen_ai.usage.completion_tokens", len), "stop_reason": ("finish_reason", str),
                 "num_turns": ("num_turns", lambda v: int(_finite(v))), "reward_score": ("reward_score", _finite)}


def _derive(attrs: dict[str, Any], raw: Any, wanted: dict[str, tuple[str, Any]]) -> None:
    if not isinstance(raw, str) or not raw.startswith("{"):
        return
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return
    if not isinstance(doc, dict):
        return
    for field, (attr, convert) in wanted.items():
        v = doc.get(field)
        if v is None or attr in attrs or isinstance(v, dict) or isinstance(v, list) != (convert is len):
            continue  # counted lists only, scalars for the rest
        try:
            attrs[attr] = convert(v)[:256] if convert is str else convert(v)
        except (TypeError, ValueError, OverflowError):
            pass


def _hex(value: Any, size: int, from_base64: bool) -> str:
    if not isinstance(value, str) or not value:
        return ""
    if from_base64:  # protobuf's MessageToDict renders bytes as base64
        import base64
        import binascii

        try:
            return base64.b64decode(value, validate=True).hex()[: size * 2]
        except (binascii.Error, ValueError):
            return ""
    return value.lower()[: size * 2]


# (resource attributes, the span in OTLP/JSON form, its attribute budget); past MAX_SPANS_PER_REQUEST the span and
# budget are None: counted as refused, never converted
SpanPairs = Iterator[tuple[dict[str, Any], "dict[str, Any] | None", "_Budget | None"]]


def decode_request(raw: bytes, content_type: str) -> tuple[SpanPairs, bool]:
    """The request's spans, one at a time, as (resource attributes, span in OTLP/JSON form, its attribute budget),
    and whether ids are base64 (protobuf) rather than hex (OTLP/JSON)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == "application/json":
        try:
            doc = json.loads(raw)
        except RecursionError:
            raise MalformedBodyError("OTLP/JSON body is nested too deeply") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise MalformedBodyError(f"OTLP/JSON body is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise MalformedBodyError("OTLP/JSON body must be an ExportTraceServiceRequest object")
        spans = doc.get("resourceSpans") or doc.get("resource_spans") or []
        if not isinstance(spans, list):
            raise MalformedBodyError("OTLP/JSON resourceSpans must be a list")
        return json_spans(spans), False
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    try:
        req.ParseFromString(raw)
    except (DecodeError, RecursionError) as exc:
        raise MalformedBodyError(f"body is not an OTLP ExportTraceServiceRequest (protobuf): {exc}") from None
    return pb_spans(req), True


def json_spans(resource_spans: list[Any]) -> SpanPairs:
    kept = 0
    for rs in resource_spans:
        if not isinstance(rs, dict):
            continue
        resource = _attrs(_dict(rs.get("resource")).get("attributes"))
        for ss in _list(rs.get("scopeSpans") or rs.get("scope_spans")):
            if not isinstance(ss, dict):
                continue
            for span in _list(ss.get("spans")):
                if not isinstance(span, dict):
                    continue
                kept += 1
                if kept > MAX_SPANS_PER_REQUEST:
                    yield resource, None, None
                    continue
                budget = _Budget()
                yield resource, {**span, "attributes": _attrs(span.get("attributes"), budget)}, budget


def pb_spans(req: Any) -> SpanPairs:
    """The spans of a parsed ExportTraceServiceRequest in OTLP/JSON form (ids base64), converted one at a time
    with the caps applied as they are read: memory follows what is kept, not what was sent."""
    import base64

    b64 = base64.b64encode
    kept = 0
    for rs in req.resource_spans:
        resource = _pb_attrs(rs.resource.attributes, _Budget())
        for ss in rs.scope_spans:
            for span in ss.spans:
                kept += 1
                if kept > MAX_SPANS_PER_REQUEST:
                    yield resource, None, None
                    continue
                budget = _Budget()
                yield (
                    resource,
                    {
                        "spanId": b64(span.span_id[:8]).decode(),
                        "traceId": b64(span.trace_id[:16]).decode(),
                        "parentSpanId": b64(span.parent_span_id[:8]).decode(),
                        "flags": span.flags,
                        "name": span.name[: 4 * MAX_SPAN_NAME],
                        "startTimeUnixNano": span.start_time_unix_nano,
                        "endTimeUnixNano": span.end_time_unix_nano,
                        "attributes": _pb_attrs(span.attributes, budget),
                    },
                    budget,
                )


def _cap(attrs: dict[str, Any], counts: Counter) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in list(attrs.items())[:MAX_ATTRIBUTES]:
        if not isinstance(v, (str, bool, int, float)) and v is not None:
            v = json.dumps(v, default=str, ensure_ascii=False)
        if isinstance(v, str) and len(v) > MAX_ATTRIBUTE_VALUE:
            v = v[: MAX_ATTRIBUTE_VALUE - 1] + "…"
            counts["capped"] += 1
        out[str(k)[:256]] = v
    if len(attrs) > MAX_ATTRIBUTES:
        counts["capped"] += len(attrs) - MAX_ATTRIBUTES
    size = sum(len(k) + (len(v) if isinstance(v, str) else 16) for k, v in out.items())
    for k in sorted(out, key=lambda key: -len(out[key]) if isinstance(out[key], str) else 0):
        if size <= MAX_ATTRIBUTES_BYTES - 256:
            break
        v = out[k]
        if isinstance(v, str) and len(v) > 64:
            size -= len(v) - 40
            out[k] = f"[{len(v)} characters dropped]"[:40]
            counts["capped"] += 1
    return out


def _identity(attrs: dict[str, Any], resource: dict[str, Any]) -> tuple[str, str]:
    for src in (attrs, resource):
        p, e = src.get("project"), src.get("experiment_name")
        if isinstance(p, str) and p and isinstance(e, str) and e:
            return p, e
    service = resource.get("service.name")
    if isinstance(service, str) and "/" in service:
        p, _, e = service.partition("/")
        if p and e:
            return p, e
    return UNASSIGNED, service if isinstance(service, str) and service else "unknown"


def to_batches(
    spans: SpanPairs, b64_ids: bool, clock: Any = None
) -> tuple[dict[tuple[str, str], dict[str, Any]], Counter]:
    """One ingest batch (protocol form) per run, and the counts of what was capped, unassigned, given its step
    from the run's step clock (`clock`: server/live/step_clock.py; `step_source: run_clock` says so), or refused for
    passing MAX_SPANS_PER_REQUEST (`too_many`)."""
    counts: Counter = Counter()
    batches: dict[tuple[str, str], dict[str, Any]] = {}
    for resource, span, budget in spans:
        if span is None or budget is None:  # past MAX_SPANS_PER_REQUEST (the generators stop converting there)
            counts["too_many"] += 1
            continue
        attrs = span["attributes"]
        counts["capped"] += budget.capped
        project, experiment = _identity(attrs, resource)
        if project == UNASSIGNED:
            counts["unassigned"] += 1
        service = resource.get("service.name") or "unknown"
        if not isinstance(service, str):
            service = str(service)[:256]
        merged = {**{f"resource.{k}": v for k, v in resource.items() if k in _RESOURCE_KEEP}, **attrs,
                  "project": project, "experiment_name": experiment, "monitor.trace_source": attrs.get(
                      "monitor.trace_source", "otlp")}
        if "step" not in merged and clock is not None and project != UNASSIGNED:
            start = _int(span.get("startTimeUnixNano"))
            step = (
                clock.step_at(project, experiment, start / 1e9)
                if isinstance(start, int) and 0 <= start < 2**63
                else None
            )
            if step is not None:  # MLflow loses verl's step tag on export: the run's clock at the span's start says it
                merged["step"], merged["step_source"] = step, "run_clock"
                counts["step_from_clock"] += 1
        lane = attrs.get("state_lane_id")
        name = span.get("name")
        record = {
            "id": _hex(span.get("spanId"), 8, b64_ids), "trace_id": _hex(span.get("traceId"), 16, b64_ids),
            "parent_id": _hex(span.get("parentSpanId"), 8, b64_ids) or None,
            "name": name if isinstance(name, str) and name else "(unnamed)",
            "lane": str(lane)[:256] if lane not in (None, "") else f"otlp/{service}"[:256],
            "kind": "state" if _top_level(span, lane) else "span",
            "start_ns": _int(span.get("startTimeUnixNano")), "end_ns": _int(span.get("endTimeUnixNano")),
            "attributes": _cap(merged, counts)}
        batch = batches.get((project, experiment))
        if batch is None:
            batch = batches[(project, experiment)] = {
                "v": 1, "client": {"id": f"otlp:{service}"[:64], "host": str(resource.get("host.name") or "otlp")[:256],
                                   "project": project, "experiment_name": experiment}, "spans": []}
        batch["spans"].append(record)
    return batches, counts


def _top_level(span: dict[str, Any], lane: Any) -> bool:
    """Whether a span is the outermost of its process (module docstring, *States*)."""
    if lane not in (None, "") or not span.get("parentSpanId"):
        return True
    flags = _int(span.get("flags"))
    return isinstance(flags, int) and flags & _PARENT_IS_REMOTE == _PARENT_IS_REMOTE


def _int(v: Any) -> Any:
    try:
        return int(v)
    except (TypeError, ValueError):
        return v  # refused by the protocol's validation, with the reason

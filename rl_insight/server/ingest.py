"""Decode and validate an ingest batch; store the valid items, report the invalid ones by index."""

from __future__ import annotations

import json
import math
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidInputError, MalformedBodyError, PayloadTooLargeError
from .metric_store import ItemError, MetricStore, SeriesRef
from .runstore.writer import NO_IDENTITY, RunStoreWriter, SampleRow
from .spans import SpanSink

PROTOCOL_VERSION = 1
MAX_ERRORS_REPORTED = 100
MAX_NAME = 1024
MAX_ATTRIBUTES = 128


@dataclass
class IngestResult:
    accepted: int = 0
    rejected: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)
    accepted_by_section: Counter = field(default_factory=Counter)
    finished_spans: list[dict[str, Any]] = field(default_factory=list)
    client_host: str = ""

    def reject(self, section: str, index: int, err: ItemError) -> None:
        self.rejected += 1
        self.reasons[err.reason] += 1
        if len(self.errors) < MAX_ERRORS_REPORTED:
            self.errors.append({"section": section, "index": index, "reason": err.reason, "detail": str(err)})


def decode_body(raw: bytes, content_encoding: str | None, max_bytes: int) -> Any:
    """gunzip (bounded, against zip bombs) and parse JSON; errors name the problem."""
    if content_encoding and content_encoding.lower() == "gzip":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            raw = d.decompress(raw, max_bytes + 1)
        except zlib.error as exc:
            raise MalformedBodyError(f"body is not valid gzip: {exc}") from None
        if len(raw) > max_bytes or d.unconsumed_tail:
            raise PayloadTooLargeError(f"decompressed body exceeds the limit of {max_bytes} bytes",
                                       hint="send smaller batches or raise --max-body-bytes")
    elif content_encoding and content_encoding.lower() not in ("identity", ""):
        raise MalformedBodyError(f"unsupported Content-Encoding {content_encoding!r}; use gzip or none")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedBodyError(f"body is not valid JSON: {exc}") from None


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_span(item: Any, finished: bool) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise ItemError("invalid_span", f"span must be an object, found {type(item).__name__}")
    sid, name = item.get("id"), item.get("name")
    if not isinstance(sid, str) or not 0 < len(sid) <= 32:
        raise ItemError("invalid_span", "span 'id' must be a non-empty string of at most 32 characters")
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise ItemError("invalid_span", f"span 'name' must be a non-empty string of at most {MAX_NAME} characters")
    start = item.get("start_ns")
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        raise ItemError("invalid_span", f"span 'start_ns' must be a non-negative integer (epoch ns), found {start!r}")
    if finished:
        end = item.get("end_ns")
        if not isinstance(end, int) or isinstance(end, bool) or end < start:
            raise ItemError("invalid_span", f"span 'end_ns' must be an integer >= start_ns, found {end!r}")
    attrs = item.get("attributes") or {}
    if not isinstance(attrs, dict) or len(attrs) > MAX_ATTRIBUTES:
        raise ItemError("invalid_span", f"span 'attributes' must be an object with at most {MAX_ATTRIBUTES} keys")
    lane = item.get("lane")
    if lane is None:
        lane = attrs.get("state_lane_id")
    return {
        "id": sid,
        "trace_id": str(item.get("trace_id") or sid),
        "parent_id": item.get("parent_id") if isinstance(item.get("parent_id"), str) else None,
        "name": name,
        "lane": None if lane is None else str(lane),
        "kind": str(item.get("kind") or "span"),
        "start_ns": start,
        "end_ns": item.get("end_ns") if finished else None,
        "attributes": attrs,
    }


def _store_identity(ref: SeriesRef) -> tuple[str, str, str, str]:
    """(project, experiment_name, name, labels JSON) under which the run store records a series."""
    labels = {k: v for k, v in ref.labels.items() if k not in ("project", "experiment_name")}
    return (ref.labels.get("project", NO_IDENTITY), ref.labels.get("experiment_name", NO_IDENTITY), ref.base_name,
            json.dumps(labels, sort_keys=True, separators=(",", ":")))


def ingest_batch(batch: Any, store: MetricStore, spans: SpanSink, run_store: RunStoreWriter | None = None) -> IngestResult:
    if not isinstance(batch, dict):
        raise InvalidInputError(f"ingest body must be a JSON object, found {type(batch).__name__}")
    version = batch.get("v", PROTOCOL_VERSION)
    if version != PROTOCOL_VERSION:
        raise InvalidInputError(f"unsupported ingest protocol version {version!r}; this server speaks {PROTOCOL_VERSION}",
                                hint="upgrade the server or the client so that they match")
    client = batch.get("client") or {}
    client_id = client.get("id") if isinstance(client, dict) else None
    if not isinstance(client_id, str) or not client_id:
        raise InvalidInputError("ingest body needs 'client': {'id': <non-empty string>}: the id makes cumulative counters idempotent")
    sections = {}
    for sec in ("series", "samples", "span_starts", "spans"):
        val = batch.get(sec)
        if val is None:
            val = []
        if not isinstance(val, list):
            raise InvalidInputError(f"'{sec}' must be a list, found {type(val).__name__}")
        sections[sec] = val

    result = IngestResult()
    rows: list[SampleRow] = []
    identities: dict[int, tuple[str, str, str, str]] = {}
    refs: list[SeriesRef | ItemError] = []
    for entry in sections["series"]:
        try:
            refs.append(store.resolve(entry))
        except ItemError as err:
            refs.append(err)

    for i, sample in enumerate(sections["samples"]):
        try:
            if not isinstance(sample, list) or len(sample) != 4:
                raise ItemError("invalid_sample", "sample must be [series_index, timestamp_s, step, value]")
            idx, ts, step, value = sample
            if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < len(refs):
                raise ItemError("invalid_sample", f"series index {idx!r} is not in 0..{len(refs) - 1}")
            ref = refs[idx]
            if isinstance(ref, ItemError):
                raise ref
            if not _number(ts):
                raise ItemError("invalid_sample", f"timestamp must be a finite number of seconds, found {ts!r}")
            if step is not None and not _number(step):
                raise ItemError("invalid_sample", f"step must be a number or null, found {step!r}")
            exposed = store.apply(ref, client_id, float(ts), value)
            if run_store is not None and ref.namespace is None:  # client self-metrics stay on /metrics only
                ident = identities.get(idx)
                if ident is None:
                    ident = identities[idx] = _store_identity(ref)
                project, experiment, name, labels = ident
                kind = ref.family.kind
                if kind == "histogram":
                    total, count = exposed  # type: ignore[misc]
                    rows.append(SampleRow(project, experiment, name + "_count", "counter", labels, step, ts, count))
                    rows.append(SampleRow(project, experiment, name + "_sum", "counter", labels, step, ts, total))
                else:
                    rows.append(SampleRow(project, experiment, name, kind, labels, step, ts, exposed))  # type: ignore[arg-type]
            result.accepted += 1
            result.accepted_by_section["samples"] += 1
        except ItemError as err:
            result.reject("samples", i, err)

    if run_store is not None:
        run_store.put_samples(rows)
        if batch.get("final") and isinstance(client.get("project"), str) and isinstance(client.get("experiment_name"), str):
            run_store.mark_finished(client["project"], client["experiment_name"])
    accepted_spans: dict[str, list[dict[str, Any]]] = {"span_starts": [], "spans": []}
    for sec, finished in (("span_starts", False), ("spans", True)):
        good: list[dict[str, Any]] = []
        for i, item in enumerate(sections[sec]):
            try:
                good.append(_check_span(item, finished))
            except ItemError as err:
                result.reject(sec, i, err)
        if good:
            (spans.add_spans if finished else spans.add_starts)(good)
            result.accepted += len(good)
            result.accepted_by_section[sec] += len(good)
            accepted_spans[sec] = good
    if run_store is not None:
        run_store.put_spans(accepted_spans["span_starts"], accepted_spans["spans"])
    result.finished_spans = accepted_spans["spans"]
    result.client_host = str(client.get("host") or "")
    return result

"""The wire contract between the training client and the ingest server: one home for it.

Stdlib only and free of `re`, `dataclasses` and `typing` at import time, because training processes
import it (through the client) on every start.

- `limits`: versions, routes, series kinds and the size limits both sides respect.
- `values`: checks of single values (`ItemError`, finite numbers, epoch ns, UTF-8 text).
- `batch`: what a client sends (`POST /api/v1/ingest`) and `decode_batch`, the one validation of it.
- `reply`: what every answer to a batch says (`IngestReply`, with the run's `RunControl`).
- `profiles`: profile control (`ProfileRequest`, process states, the steps grammar, the defaults).
- `stacks`: stack snapshots (`StackRequest`, `decode_stack_report`, their bounds).

Everything is re-exported here; callers write `from rl_insight.protocol import X`.
"""

from __future__ import annotations

from .batch import Batch, ClientInfo, Sample, SeriesDef, SpanRecord, decode_batch
from .limits import (
    HEADER_CLIENT,
    INT64_MAX,
    KIND_COUNTER,
    KIND_GAUGE,
    KIND_HISTOGRAM,
    KINDS,
    MAX_ATTRIBUTE_KEY,
    MAX_ATTRIBUTE_VALUE,
    MAX_ATTRIBUTES,
    MAX_ATTRIBUTES_BYTES,
    MAX_BUCKETS,
    MAX_CLIENT_ID,
    MAX_DOC,
    MAX_ERRORS_REPORTED,
    MAX_EXACT_INT,
    MAX_ID,
    MAX_KIND,
    MAX_LABEL_NAME,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    MAX_LABELS_BYTES,
    MAX_LANE,
    MAX_METRIC_NAME,
    MAX_SPAN_NAME,
    MAX_TS_S,
    NAMESPACES,
    PROTOCOL_VERSION,
    PROTOCOL_VERSIONS,
    ROUTE_INGEST,
    ROUTE_TARGETS,
    SPAN_KINDS,
)
from .profiles import (
    CLIENT_HEARTBEAT_S,
    DEFAULT_PROFILE_ACTIVITIES,
    DEFAULT_PROFILE_BYTES,
    DEFAULT_PROFILE_TOOL,
    DEFAULT_PROFILE_TTL_S,
    DEFAULT_PROFILE_WINDOW_S,
    MAX_PROFILE_BYTES,
    MAX_PROFILE_CHUNK_BYTES,
    MAX_PROFILE_SELECTORS,
    MAX_PROFILE_STEPS,
    MAX_PROFILE_TTL_S,
    MAX_PROFILE_WINDOW_S,
    PROCESS_STATES,
    PROCESS_TERMINAL,
    PROFILE_ACTIVITIES,
    PROFILE_CHUNK_BYTES,
    PROFILE_TOOLS,
    ROUTE_PROFILES,
    ProfileRequest,
    parse_steps,
)
from .reply import IngestReply, RunControl
from .stacks import DEFAULT_STACK_DEADLINE_S, MAX_STACK_DEADLINE_S, ROUTE_STACKS, StackRequest, decode_stack_report
from .values import BatchError, ItemError, TextCleaner, clean_text, epoch_ns, finite_float, is_number

__all__ = [
    "Batch", "BatchError", "CLIENT_HEARTBEAT_S", "ClientInfo", "DEFAULT_PROFILE_ACTIVITIES", "DEFAULT_STACK_DEADLINE_S",
    "MAX_STACK_DEADLINE_S", "ROUTE_STACKS", "StackRequest", "decode_stack_report",
    "DEFAULT_PROFILE_BYTES", "DEFAULT_PROFILE_TOOL", "DEFAULT_PROFILE_TTL_S", "DEFAULT_PROFILE_WINDOW_S",
    "INT64_MAX", "IngestReply", "ItemError", "KINDS", "KIND_COUNTER", "KIND_GAUGE", "KIND_HISTOGRAM",
    "MAX_ATTRIBUTES", "MAX_ATTRIBUTES_BYTES", "MAX_ATTRIBUTE_KEY", "MAX_ATTRIBUTE_VALUE", "MAX_BUCKETS",
    "MAX_CLIENT_ID", "MAX_DOC", "MAX_ERRORS_REPORTED", "MAX_EXACT_INT", "MAX_ID", "MAX_KIND", "MAX_LABELS",
    "HEADER_CLIENT", "MAX_LABELS_BYTES", "MAX_LABEL_NAME", "MAX_LABEL_VALUE", "MAX_LANE", "MAX_METRIC_NAME",
    "MAX_PROFILE_BYTES",
    "MAX_PROFILE_CHUNK_BYTES", "MAX_PROFILE_SELECTORS", "MAX_PROFILE_STEPS", "MAX_PROFILE_TTL_S",
    "MAX_PROFILE_WINDOW_S", "MAX_SPAN_NAME", "MAX_TS_S", "NAMESPACES", "PROCESS_STATES", "PROCESS_TERMINAL",
    "PROFILE_ACTIVITIES", "PROFILE_CHUNK_BYTES", "PROFILE_TOOLS", "PROTOCOL_VERSION", "PROTOCOL_VERSIONS",
    "ProfileRequest", "ROUTE_INGEST", "ROUTE_PROFILES", "ROUTE_TARGETS", "RunControl", "SPAN_KINDS", "Sample",
    "SeriesDef", "SpanRecord", "TextCleaner", "clean_text", "decode_batch", "epoch_ns", "finite_float", "is_number",
    "parse_steps",
]

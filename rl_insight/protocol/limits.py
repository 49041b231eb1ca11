"""The contract's constants: versions, routes, series kinds and the size limits both sides respect."""

PROTOCOL_VERSION = 1  # what a client speaks until the server says more
PROTOCOL_VERSIONS = (1, 2)  # what this server accepts (sent back in every ingest answer as `protocols`)

# Routes (the client and the server both use these constants).
ROUTE_INGEST = "/api/v1/ingest"
# the sending process's client id on every request: what a load balancer hashes on to keep a process on one server
# (docs/scale.md: haproxy `balance hdr(X-RL-Insight-Client)`)
HEADER_CLIENT = "X-RL-Insight-Client"
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

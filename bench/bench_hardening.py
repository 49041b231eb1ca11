"""What hardening round two (issue 21) costs and saves, measured so that any two checkouts compare side by side.

    python bench/bench_hardening.py otlp      # peak memory and time of one hostile OTLP/HTTP protobuf body
    python bench/bench_hardening.py reports   # time of one profile status report with 50 and 1,000 processes
    python bench/bench_hardening.py deltas    # memory kept after 30 OTLP delta requests refused for their labels

Run it from the root of each checkout (the package is imported from the working directory), interleaved.

* `otlp`: a 13.8 MiB ExportTraceServiceRequest of ~1.6 M small key-value leaves (8 spans, each with 200k
  int attributes nested in arrays and lists), decoded and mapped to ingest batches the way the route does
  (`decode_request` + `to_batches`), in a fresh child process each: peak RSS above the parsed request, and
  the seconds it took.
* `reports`: `ProfileBook.report` for one more process of a request that already has 50, then 1,000.
* `deltas` (issue 49, item 2): 30 OTLP/JSON metrics requests of 20,000 delta points each, every point with labels
  over the series limit (10 labels of 1,000 characters), converted as the route does (`OtlpMetrics.decode` +
  `to_batches`) in a fresh child process: RSS after the first request (the parser's peak, which the allocator
  keeps), how much it grew over the 29 after it (what the delta totals hold), and the points refused.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))


def _hostile_body() -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "p/e"
    scope = rs.scope_spans.add()
    for s in range(8):
        span = scope.spans.add()
        span.name, span.span_id, span.trace_id = "s", bytes([s + 1]) * 8, b"\x02" * 16
        span.start_time_unix_nano, span.end_time_unix_nano = 1_790_000_000 * 10**9, 1_790_000_001 * 10**9
        for a in range(20):
            attr = span.attributes.add()
            attr.key = f"a{a}"
            lst = attr.value.kvlist_value
            for i in range(100):
                inner = lst.values.add()
                inner.key = str(i)
                arr = inner.value.array_value
                for j in range(99):
                    arr.values.add().int_value = j
    return req.SerializeToString()


def _otlp_child(path: str) -> None:
    from rl_insight.server.intake.otlp import decode_request, to_batches

    raw = Path(path).read_bytes()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    decoded, b64 = decode_request(raw, "application/x-protobuf")
    batches, counts = to_batches(decoded, b64)
    took = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    spans = sum(len(b["spans"]) for b in batches.values())
    print(json.dumps({"body_mib": round(len(raw) / 2**20, 1), "peak_above_mib": round((peak - before) / 1024, 1),
                      "seconds": round(took, 2), "spans": spans, "capped": counts.get("capped", 0)}))


def _deltas_child() -> None:
    import gc

    from rl_insight.server.intake.otlp_metrics import OtlpMetrics

    attrs = [{"key": f"k{i}", "value": {"stringValue": f"{i}" * 1000}} for i in range(10)]
    conv = OtlpMetrics()
    refused = 0
    gc.collect()
    start = _rss_kib()
    first = start
    for r in range(30):
        body = json.dumps({"resourceMetrics": [{"resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "p/e"}}]}, "scopeMetrics": [{"metrics": [
                {"name": "c", "sum": {"isMonotonic": True, "aggregationTemporality": 1, "dataPoints": [
                    {"startTimeUnixNano": "1", "timeUnixNano": "2", "asDouble": 1.0,
                     "attributes": [*attrs, {"key": "i", "value": {"intValue": str(r * 20_000 + i)}}]}
                    for i in range(20_000)]}}]}]}]}).encode()
        batches, counts = conv.to_batches(conv.decode(body, "application/json"))
        refused += sum(counts.values())
        del body, batches
        gc.collect()
        if r == 0:
            first = _rss_kib()  # (the parser's own peak, reached once, stays with the allocator)
    print(json.dumps({"after_first_mib": round((first - start) / 1024, 1),
                      "grown_over_29_more_mib": round((_rss_kib() - first) / 1024, 1), "refused_points": refused}))


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def deltas() -> None:
    out = subprocess.run([sys.executable, __file__, "_deltas_child"], capture_output=True, text=True, timeout=900)
    print(out.stdout.strip() or out.stderr[-2000:])


def otlp() -> None:
    body = Path(tempfile.mkdtemp()) / "otlp.bin"
    body.write_bytes(_hostile_body())
    out = subprocess.run(
        [sys.executable, __file__, "_otlp_child", str(body)], capture_output=True, text=True, timeout=600
    )
    print(out.stdout.strip() or out.stderr[-2000:])


def reports() -> None:
    from rl_insight.server.rooms.profiles.book import ProfileBook

    book = ProfileBook(Path(tempfile.mkdtemp()) / "profiles", analyze=False)
    rid = book.create("p", "e", 1, 1)["id"]
    results = {}
    pid = 0
    for n in (50, 1000):
        while pid < n:
            book.report(rid, {"state": "armed", "process": {"host": "h", "pid": pid, "rank": pid, "lanes": ["rank_0"]}})
            pid += 1
        t0 = time.perf_counter()
        for i in range(20):  # 20 more reports of processes already there (states moving on)
            book.report(rid, {"state": "profiling", "process": {"host": "h", "pid": i, "rank": i, "lanes": ["rank_0"]}})
        results[n] = (time.perf_counter() - t0) / 20 * 1000
    print(json.dumps({"ms_per_report_at_50": round(results[50], 2), "ms_per_report_at_1000": round(results[1000], 2)}))


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "otlp"
    if what == "_otlp_child":
        _otlp_child(sys.argv[2])
    elif what == "_deltas_child":
        _deltas_child()
    else:
        {"otlp": otlp, "reports": reports, "deltas": deltas}[what]()

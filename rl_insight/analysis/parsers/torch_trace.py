"""torch.profiler Chrome traces (`.json`, `.json.gz`) -> event table rows.

Decoded with msgspec into small typed structs (event `args` stay undecoded unless kept), which is
several times faster and lighter than `json.load`. `ts`/`dur` are microseconds relative to
`baseTimeNanoseconds`, which is applied so that ranks and sources share the epoch clock. A
truncated file is read up to the damage (each complete event before it is kept) with a warning.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from typing import Any, Union

import msgspec

from ..table import Columns, Report
from .jsonscan import int_after_key, object_after_key, scan_objects
from .names import identify
from .step_marks import split_by_step_marks
from .torch_select import category_pattern, select

Id = Union[int, str, None]
COMM = re.compile(
    r"nccl|gloo|hccl|all_?reduce|all_?gather|reduce_?scatter|broadcast|all_?to_?all|c10d::|record_param_comms|"
    r"send|recv|barrier",
    re.I,
)
KERNEL_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
ANNOTATION_CATS = {"user_annotation", "gpu_user_annotation"}
# python function tracing (`with_stack`, or upstream's fixtures' `cat: "python"`): the ranges of a trace
# that has no record_function annotations at all
PYTHON_CATS = {"python", "python_function"}
OP_CATS = {"cpu_op", "python_function", "cuda_runtime", "cuda_driver"}
DETAILS = ("annotations", "ops", "kernels")
MEMORY_EVENT = "[memory]"  # profile_memory's allocator samples: `ph: i`, kineto's `cat: cpu_instant_event`
# what the default detail reads: stage ranges, (communication) kernels, memory samples
_DEFAULT_KEPT = category_pattern(ANNOTATION_CATS | KERNEL_CATS | {"cpu_instant_event"})


class Event(msgspec.Struct, forbid_unknown_fields=False):
    ph: str = ""
    name: str = ""
    cat: str | None = None
    pid: Id = None
    tid: Id = None
    ts: float | str | None = None
    dur: float | str | None = None
    args: msgspec.Raw = msgspec.Raw(b"null")


class Trace(msgspec.Struct, forbid_unknown_fields=False):
    traceEvents: list[Event] = []
    baseTimeNanoseconds: int | None = None
    distributedInfo: dict[str, Any] | None = None


class Header(msgspec.Struct, forbid_unknown_fields=False):
    baseTimeNanoseconds: int | None = None
    distributedInfo: dict[str, Any] | None = None


_decoder = msgspec.json.Decoder(Trace)
_event_decoder = msgspec.json.Decoder(Event)


def _zlib() -> Any:
    """ISA-L's zlib (the `isal` package of the analysis extra) when installed, about 2.7x as fast as the stdlib's at
    inflating a large trace; the stdlib's otherwise. Both have zlib's interface."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib
    return isal_zlib


class InflateLimitError(ValueError):
    """A gzip'd trace inflates past the bound it is read under (a gzip bomb, or a trace too large to analyse here)."""


# Set by a process that reads traces it did not write (the server's analysis worker); None reads any size.
inflate_limit: int | None = None
_SLICE = 1 << 18  # compressed bytes fed at once under a limit: what is left of a slice is all that is ever copied


def _inflate(raw: bytes, limit: int | None) -> tuple[bytes, bool]:
    """gzip members (concatenated, as `gzip` writes appended files) to bytes, and whether the stream ended cleanly (a
    truncated or damaged stream gives what decompressed before the damage).

    Without `limit`, each member is inflated in one call (no output chunks to join: one copy of 236 MB costs as much as
    half the inflating). With one, at most `limit` bytes (InflateLimitError past it): the input is fed in slices and
    the output taken at most `_SLICE` * 4 at a time, so memory never exceeds `limit` plus one chunk whatever the
    compression ratio."""
    z = _zlib()
    out: list[bytes] = []
    size, rest = 0, raw
    while rest[:2] == b"\x1f\x8b":
        d = z.decompressobj(16 + zlib.MAX_WBITS)
        try:
            if limit is None:
                out.append(d.decompress(rest))
            else:
                view = memoryview(rest)
                for start in range(0, len(rest), _SLICE):
                    pending: bytes | memoryview = view[start: start + _SLICE]
                    while True:
                        chunk = d.decompress(pending, _SLICE * 4)
                        size += len(chunk)
                        if size > limit:
                            raise InflateLimitError(f"inflates past {limit} bytes (a gzip bomb, or a trace too large "
                                                    "to analyse here)")
                        out.append(chunk)
                        pending = d.unconsumed_tail
                        if d.eof or (not pending and len(chunk) < _SLICE * 4):  # a full chunk may leave output held
                            break
                    if d.eof:
                        break
        except (zlib.error, z.error):
            return b"".join(out), False
        if not d.eof:
            return b"".join(out), False  # truncated: keep what decompressed
        rest = d.unused_data
    return (out[0] if len(out) == 1 else b"".join(out)), True


def read_bytes(path: Path, report: Report, limit: int | None = None) -> bytes:
    """The trace's bytes, gunzip'd when gzip'd; a truncated gzip stream gives what decompresses, with a
    warning. `limit` (default: the module's `inflate_limit`) bounds the inflated size."""
    raw = path.read_bytes()
    limit = inflate_limit if limit is None else limit
    if raw[:2] != b"\x1f\x8b":
        if limit is not None and len(raw) > limit:
            raise InflateLimitError(f"{len(raw)} bytes exceeds the limit of {limit} bytes")
        return raw
    data, clean = _inflate(raw, limit)
    if not clean:
        report.warn(path, "gzip stream is truncated; reading the part that decompresses")
    return data


MAX_RANK = 2**31  # a rank past this is damage, not a process group
MAX_BASE_NS = 2**62  # year 2116: a larger base is damage (and would overflow int64 once events are added)
_HEADER_OBJECT_MAX = 1 << 20  # distributedInfo is a few hundred bytes; anything longer is not it


def _header(data: bytes) -> Header:
    """The top-level keys around `traceEvents` (torch writes them before it, other writers after), read
    without decoding the events. Linear in the file: the first occurrence of each key is read with one
    forward scan (a damaged file that repeats a key thousands of times costs no more than a clean one)."""
    begin = data.find(b'"traceEvents"')
    head = data[:begin] if begin >= 0 else b""
    tail = data[-65536:] if begin >= 0 else b""
    base = int_after_key(head, b"baseTimeNanoseconds")
    if base is None:
        base = int_after_key(tail, b"baseTimeNanoseconds")
    dist_raw = object_after_key(head, b"distributedInfo", _HEADER_OBJECT_MAX) or \
        object_after_key(tail, b"distributedInfo", _HEADER_OBJECT_MAX)
    dist = None
    if dist_raw is not None:
        try:
            dist = msgspec.json.decode(dist_raw)
        except msgspec.DecodeError:
            dist = None
    return Header(baseTimeNanoseconds=base, distributedInfo=dist if isinstance(dist, dict) else None)


def _salvage(data: bytes, path: Path, report: Report) -> Trace:
    """Events of a damaged trace up to the first broken one (torch writes the header before traceEvents)."""
    header = _header(data)
    events = scan_objects(data, max(0, data.find(b'"traceEvents"')), _event_decoder.decode)
    report.warn(path, f"trace is truncated or damaged; read {len(events)} complete events before the damage")
    return Trace(
        traceEvents=events, baseTimeNanoseconds=header.baseTimeNanoseconds, distributedInfo=header.distributedInfo
    )


def _decode(data: bytes, path: Path, report: Report, detail: tuple[str, ...]) -> Trace:
    """The trace's events: at the default detail only the kept ones are located and decoded (see
    torch_select); every event when operators or kernels are kept, or when the fast path is unsure."""
    if "ops" not in detail and "kernels" not in detail:
        events = select(data, _DEFAULT_KEPT, _event_decoder.decode)
        if events is not None and any(e.ph == "X" and e.cat in ANNOTATION_CATS for e in events):
            header = _header(data)
            return Trace(traceEvents=events, baseTimeNanoseconds=header.baseTimeNanoseconds,
                         distributedInfo=header.distributedInfo)
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError:
        return _salvage(data, path, report)


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _memory_sample(cols: Columns, e: Event, base: int, role: str, rank: int | None, lane: str, step: int | None,
                   fname: str) -> None:
    try:
        args = msgspec.json.decode(bytes(e.args))
        ts = _num(e.ts)
        allocated = _num(args.get("Total Allocated"))
    except (msgspec.DecodeError, AttributeError):
        return
    if ts is None or allocated is None:
        return
    dev_type, dev_id = args.get("Device Type"), args.get("Device Id")
    device = (
        "cpu" if dev_type == 0 or dev_id == -1 else f"cuda:{dev_id}" if dev_type == 1 else f"device{dev_type}:{dev_id}"
    )
    cols.add_memory(
        role, rank, lane, step, fname, base + round(ts * 1000), allocated, _num(args.get("Total Reserved")), device
    )


def parse(path: Path, report: Report, *, root: Path | None = None, detail: tuple[str, ...] = ("annotations",),
          out: Columns | None = None) -> Columns:
    cols = out if out is not None else Columns()
    data = read_bytes(path, report)
    if not data.strip():
        report.error(path, "empty file")
        return cols
    trace = _decode(data, path, report, detail)
    ident = identify(path, root)
    info = trace.distributedInfo or {}
    if type(info.get("rank")) is int and 0 <= info["rank"] < MAX_RANK and ident.replica is None:
        ident = ident.with_rank(info["rank"])  # the process group's rank beats the file name
    rank, role, lane = ident.rank, ident.role, ident.lane()
    base = trace.baseTimeNanoseconds or 0
    if not 0 <= base < MAX_BASE_NS:
        report.warn(path, f"baseTimeNanoseconds {str(base)[:24]} is not a time; reading the trace on its own clock")
        base = 0
    elif not base:
        report.warn(path, "no baseTimeNanoseconds: times stay on the profiler's own clock and may not align with "
                          "other files")
    keep_ops, keep_kernels = "ops" in detail, "kernels" in detail
    fname = str(path)
    is_comm: dict[str, bool] = {}  # one regex search per distinct name, not per event
    seg = cols.segment("torch", role, rank, lane, ident.step, fname)
    # local appends: this loop runs once per event (millions), so no method call per row
    a_name, a_cat, a_start, a_end, a_attr = seg.name.append, seg.category.append, seg.start_ns.append, \
        seg.end_ns.append, seg.attributes.append
    kept = 0
    annotation_cats = ANNOTATION_CATS
    if not any(e.ph == "X" and e.cat in ANNOTATION_CATS for e in trace.traceEvents) and \
            any(e.ph == "X" and e.cat in PYTHON_CATS for e in trace.traceEvents):
        annotation_cats = PYTHON_CATS
        report.warn(path, "no record_function annotations; analysing its python function ranges instead")
    for e in trace.traceEvents:
        if e.ph != "X":
            if e.ph == "i" and e.name == MEMORY_EVENT:  # profile_memory: allocator totals after each (de)allocation
                _memory_sample(cols, e, base, role, rank, lane, ident.step, fname)
            continue
        cat = e.cat or ""
        name = e.name
        comm = is_comm.get(name)
        if comm is None:
            comm = is_comm[name] = COMM.search(name) is not None
        if cat in annotation_cats:
            category = "communication" if comm else "annotation"
        elif cat in KERNEL_CATS:
            if comm:
                category = "communication"
            elif keep_kernels:
                category = "kernel"
            else:
                continue
        elif keep_ops and cat in OP_CATS:
            category = "communication" if comm else "op"
        else:
            continue
        ts, dur = e.ts, e.dur
        if ts.__class__ is not float or dur.__class__ is not float:
            ts, dur = _num(ts), _num(dur)
            if ts is None or dur is None:
                continue
        if dur < 0:
            continue
        a_name(name)
        a_cat(category)
        a_start(ts)  # µs floats; converted to epoch ns in one vectorized pass below
        a_end(dur)
        a_attr(bytes(e.args).decode() if category == "annotation" and len(e.args) > 4 else None)
        kept += 1
    if kept:
        import numpy as np

        n0 = len(seg.start_ns) - kept
        ts_us = np.asarray(seg.start_ns[n0:], dtype="float64")
        dur_us = np.asarray(seg.end_ns[n0:], dtype="float64")
        start_ns = base + np.round(ts_us * 1000).astype("int64")
        end_ns = start_ns + np.round(dur_us * 1000).astype("int64")
        if n0 == 0:  # a fresh segment (the usual case): keep the arrays, the table takes them without copying
            seg.start_ns, seg.end_ns = start_ns, end_ns  # type: ignore[assignment]  # numpy arrays: the table takes them without copying
        else:
            seg.start_ns[n0:] = start_ns.tolist()
            seg.end_ns[n0:] = end_ns.tolist()
        if ident.step is None:  # a file of several steps: the trace's own step ranges say which (step_marks)
            split_by_step_marks(cols, seg)
    if kept == 0:
        report.warn(
            path,
            "no user annotations (record_function ranges) found; profile with verl's stage annotations or "
            "use --detail ops,kernels",
        )
    report.parsed.append(fname)
    return cols

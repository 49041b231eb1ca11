"""verl's `torch_memory` profiler output: pickled `torch.cuda.memory._snapshot()` dictionaries.

The snapshot's `device_traces` hold one entry per allocator event (`action`: alloc, free_requested,
free_completed, segment_alloc, segment_free, …; `size` in bytes; `time_us` on the epoch clock in
recent torch). Allocated bytes over time are the running sum of alloc / free_completed sizes, and
reserved bytes of segment_alloc / segment_free, both anchored so that they end at what the
snapshot's `segments` hold at the time it was taken.

A pickle can run code when loaded; this reader refuses every class and global, so only the plain
dicts, lists, strings and numbers a snapshot consists of are ever built.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

from ..table import Columns, Report
from .names import identify


class _PlainDataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: a memory snapshot holds only plain data")


def looks_like_pickle(head: bytes) -> bool:
    return len(head) > 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def parse(path: Path, report: Report, *, root: Path | None = None, out: Columns | None = None) -> Columns:
    cols = out if out is not None else Columns()
    try:
        snap = _PlainDataUnpickler(io.BytesIO(path.read_bytes())).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, MemoryError) as exc:
        report.error(path, f"not a readable memory snapshot: {exc}")
        return cols
    if not isinstance(snap, dict) or not isinstance(snap.get("device_traces"), list):
        report.error(path, "not a torch memory snapshot (no device_traces)")
        return cols
    ident = identify(path, root)
    lane = ident.lane()
    segments = [s for s in snap.get("segments") or [] if isinstance(s, dict)]
    samples = 0
    for device, trace in enumerate(snap["device_traces"]):
        if not isinstance(trace, list):
            continue
        entries = [e for e in trace if isinstance(e, dict) and isinstance(e.get("time_us"), (int, float))]
        if not entries:
            if trace:
                report.warn(path, f"device {device}: allocator events carry no time_us (torch too old); not placed "
                                  "on the timeline")
            continue
        mine = [s for s in segments if s.get("device", device) == device]
        final_alloc = sum(int(s.get("allocated_size", 0) or 0) for s in mine)
        final_reserved = sum(int(s.get("total_size", 0) or 0) for s in mine)
        alloc = reserved = 0
        series = []
        for e in sorted(entries, key=lambda e: e["time_us"]):
            size = int(e.get("size", 0) or 0)
            action = e.get("action")
            if action == "alloc":
                alloc += size
            elif action == "free_completed":
                alloc -= size
            elif action == "segment_alloc":
                reserved += size
            elif action == "segment_free":
                reserved -= size
            else:
                continue
            series.append((int(e["time_us"] * 1000), alloc, reserved))
        da, dr = final_alloc - alloc, final_reserved - reserved  # what was already held when recording started
        for ts_ns, a, r in series:
            cols.add_memory(ident.role, ident.rank, lane, ident.step, str(path), ts_ns, float(a + da), float(r + dr),
                            f"cuda:{device}")
            samples += 1
    if samples:
        report.parsed.append(str(path))
    elif not any(report.errors):
        report.warn(path, "memory snapshot without timed allocator events")
    return cols

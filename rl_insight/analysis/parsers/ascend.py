"""Ascend (torch_npu) profiles: `ascend_pytorch_profiler_<rank>.db` (verl's default Db export) and the
text `trace_view.json` (bare array, string timestamps in epoch µs).

DB: verl's MSTX ranges from `MSTX_EVENTS` (epoch ns) with messages from `STRING_IDS`.
trace_view.json: mstx/msprof-tx ranges, HCCL/communication events, and the Overlap Analysis lanes
(Computing, Communication, Communication(Not Overlapped), Free) for communication analysis. A
truncated trace_view.json (an interrupted analyse leaves it without its closing `]`) is read up to
the damage.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import msgspec

from ..table import Columns, Report
from .jsonscan import scan_objects
from .names import identify
from .sqlite import open_export
from .torch_trace import COMM, Event, _event_decoder

_decoder = msgspec.json.Decoder(list[Event])
MSTX_LANE = re.compile(r"mstx|msproftx|tx\b", re.I)
OVERLAP_THREADS = {"Computing", "Communication", "Communication(Not Overlapped)", "Free"}


def _lane(path: Path, root: Path | None, rank: int | None) -> tuple[str, int | None, str, int | None]:
    ident = identify(path, root).with_rank(rank)
    return ident.role, ident.rank, ident.lane(), ident.step


def parse_db(path: Path, report: Report, *, root: Path | None = None, out: Columns | None = None) -> Columns:
    cols = out if out is not None else Columns()
    opened = open_export(path, report, "MSTX_EVENTS", "profile with msprof_tx=True (verl's npu profiler does)")
    if opened is None:
        return cols
    conn, tables = opened
    try:
        range_types = {2}
        if "ENUM_MSTX_EVENT_TYPE" in tables:
            named = {
                i
                for i, n in conn.execute("SELECT id, name FROM ENUM_MSTX_EVENT_TYPE")
                if "range" in str(n).lower() or "start" in str(n).lower()
            }
            range_types = named or range_types
        strings = dict(conn.execute("SELECT id, value FROM STRING_IDS")) if "STRING_IDS" in tables else {}
        role, rank, lane, step = _lane(path, root, None)
        rows = conn.execute("SELECT startNs, endNs, eventType, message FROM MSTX_EVENTS ORDER BY startNs")
        skipped = 0
        for start, end, etype, message in rows:
            if etype not in range_types:
                continue
            name = strings.get(message, message if isinstance(message, str) else None)
            if start is None or end is None or end < start or not name:
                skipped += 1
                continue
            cols.add("mstx", role, rank, lane, str(name), "communication" if COMM.search(str(name)) else "annotation",
                     int(start), int(end), step, None, str(path))
        if skipped:
            report.warn(path, f"{skipped} MSTX ranges without an end or message were skipped")
        report.parsed.append(str(path))
    except sqlite3.DatabaseError as exc:
        report.error(path, f"cannot read MSTX_EVENTS ({exc})")
    finally:
        conn.close()
    return cols


def _events(data: bytes, path: Path, report: Report) -> list[Event]:
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError:
        pass
    events: list[Event] = scan_objects(data, 0, _event_decoder.decode)
    report.warn(path, f"trace_view.json is truncated or damaged; read {len(events)} complete events before the damage")
    return events


def parse_trace_view(path: Path, report: Report, *, root: Path | None = None, out: Columns | None = None,
                     rank: int | None = None) -> Columns:
    cols = out if out is not None else Columns()
    data = path.read_bytes()
    if not data.strip():
        report.error(path, "empty file")
        return cols
    events = _events(data, path, report)
    if rank is None:  # profiler_info_<rank>.json sits next to ASCEND_PROFILER_OUTPUT/
        for info in path.parent.parent.glob("profiler_info_*.json"):
            m = re.search(r"profiler_info_(\d+)\.json$", info.name)
            if m:
                rank = int(m.group(1))
    role, rank, lane, step = _lane(path, root, rank)
    proc_names: dict[Any, str] = {}
    thread_names: dict[tuple[Any, Any], str] = {}
    for e in events:
        if e.ph == "M":
            args = msgspec.json.decode(e.args) if len(e.args) > 4 else {}
            if e.name == "process_name" and isinstance(args, dict):
                proc_names[str(e.pid)] = str(args.get("name", ""))
            elif e.name == "thread_name" and isinstance(args, dict):
                thread_names[(str(e.pid), str(e.tid))] = str(args.get("name", ""))
    fname = str(path)
    for e in events:
        if e.ph != "X":
            continue
        try:
            start_us, dur_us = float(e.ts), float(e.dur)  # type: ignore[arg-type]  # a bad value raises and the event is skipped
        except (TypeError, ValueError):
            continue
        if dur_us < 0:
            continue
        start = int(round(start_us * 1000))
        end = start + int(round(dur_us * 1000))
        proc = proc_names.get(str(e.pid), "")
        thread = thread_names.get((str(e.pid), str(e.tid)), "")
        if proc == "Overlap Analysis" and (thread in OVERLAP_THREADS or e.name in OVERLAP_THREADS):
            cols.add("mstx", role, rank, lane, thread or e.name, "overlap", start, end, step, None, fname)
        elif MSTX_LANE.search(proc) or MSTX_LANE.search(thread) or (e.cat or "").lower() in ("mstx", "msproftx"):
            cols.add("mstx", role, rank, lane, e.name, "communication" if COMM.search(e.name) else "annotation",
                     start, end, step, None, fname)
        elif proc in ("HCCL", "Communication") or (e.cat or "").lower() == "hccl":
            cols.add("mstx", role, rank, lane, e.name, "communication", start, end, step, None, fname)
    report.parsed.append(fname)
    return cols

"""Nsight Systems exports: SQLite (`nsys export --type sqlite`) and JSON lines (`--type jsonlines`).

NVTX ranges: push/pop (eventType 59) and start/end (60), text from `text` or `StringIds[textId]`.
Times are ns since the session start; `TARGET_INFO_SESSION_START_TIME.utcEpochNs` puts them on the
epoch clock (upstream used the boot-relative `ANALYSIS_DETAILS.startTime`, which misaligns nodes).
Rank from the captured `RANK` environment variable, else the file name.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any, Iterable

from ..table import Columns, Report
from .names import identify
from .sqlite import open_export
from .torch_trace import COMM

RANGE_TYPES = {59, 60}
_RANK_ENV = re.compile(r'RANK\s*=\s*"?(\d+)"?', re.I)


def _rank_from_env(values: Iterable[tuple[str, str]]) -> int | None:
    for name, value in values:
        if "ENVIRONMENT" in (name or "").upper() and value:
            m = re.search(r'(?:^|[^_A-Z])RANK\s*=\s*"?(\d+)"?', str(value), re.I)
            if m:
                return int(m.group(1))
    return None


def _emit(cols: Columns, rows: Iterable[tuple[Any, Any, Any, Any, Any]], strings: dict[int, str], epoch: int,
          path: Path, report: Report, rank: int | None, root: Path | None) -> None:
    ident = identify(path, root).with_rank(rank)
    rank, role, lane = ident.rank, ident.role, ident.lane()
    bad = 0
    for start, end, event_type, text, text_id in rows:
        if event_type not in RANGE_TYPES:
            continue
        name = text if text else strings.get(text_id) if text_id is not None else None
        if start is None or end is None or end < start or not name:
            bad += 1
            continue
        cols.add("nsys", role, rank, lane, name, "communication" if COMM.search(name) else "annotation",
                 epoch + int(start), epoch + int(end), ident.step, None, str(path))
    if bad:
        report.warn(path, f"{bad} NVTX ranges without an end or a name were skipped")
    if epoch == 0:
        report.warn(path, "no TARGET_INFO_SESSION_START_TIME: times are relative to the capture start")
    report.parsed.append(str(path))


def parse_sqlite(path: Path, report: Report, *, root: Path | None = None, out: Columns | None = None) -> Columns:
    cols = out if out is not None else Columns()
    opened = open_export(path, report, "NVTX_EVENTS", "was the application annotated (verl's nsys profiler) and "
                                                      "exported with --type sqlite?")
    if opened is None:
        return cols
    conn, tables = opened
    try:
        strings = dict(conn.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables else {}
        epoch = 0
        if "TARGET_INFO_SESSION_START_TIME" in tables:
            row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
            epoch = int(row[0]) if row and row[0] else 0
        rank = (
            _rank_from_env(conn.execute("SELECT name, value FROM META_DATA_CAPTURE"))
            if "META_DATA_CAPTURE" in tables
            else None
        )
        rows = conn.execute('SELECT start, "end", eventType, text, textId FROM NVTX_EVENTS ORDER BY start')
        _emit(cols, rows, strings, epoch, path, report, rank, root)
    except sqlite3.DatabaseError as exc:
        report.error(path, f"cannot read NVTX ranges ({exc})")
    finally:
        conn.close()
    return cols


def parse_jsonl(path: Path, report: Report, *, root: Path | None = None, out: Columns | None = None) -> Columns:
    cols = out if out is not None else Columns()
    strings: dict[int, str] = {}
    ranges: list[tuple[Any, Any, Any, Any, Any]] = []
    meta: list[tuple[str, str]] = []
    epoch = 0
    bad_lines = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except ValueError:
                bad_lines += 1
                continue
            table = row.get("table") if isinstance(row, dict) else None
            if table == "StringIds":
                strings[row.get("id")] = row.get("value")
            elif table == "NVTX_EVENTS":
                ranges.append(
                    (row.get("start"), row.get("end"), row.get("eventType"), row.get("text"), row.get("textId"))
                )
            elif table == "TARGET_INFO_SESSION_START_TIME" and row.get("utcEpochNs"):
                epoch = int(row["utcEpochNs"])
            elif table == "META_DATA_CAPTURE":
                meta.append((row.get("name", ""), row.get("value", "")))
    if bad_lines:
        report.warn(path, f"{bad_lines} lines are not JSON and were skipped")
    ranges.sort(key=lambda r: (r[0] is None, r[0] or 0))
    _emit(cols, ranges, strings, epoch, path, report, _rank_from_env(meta), root)
    return cols

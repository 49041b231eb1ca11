"""The timeline's read side: a window of a run's spans per lane, merged below a resolution.

A narrow window reads its lanes' spans from the covering (run_id, lane, start_ns, end_ns, kind, name [, id]) index,
from the run's longest span before the window on (no finished span reaching into it starts earlier) plus the open
ones; a window whose resolution is at least the level-of-detail summary's first (runstore/spans/span_lod.py: 0.27 s, a
window of about half an hour at 1,500 px) reads the summary instead, whose size follows the window, not the spans.
Either way the answer is the same merge (span_lod.merge_lane), so the two paths agree span for span away from the
window's edges.
"""

from __future__ import annotations

import time
from heapq import merge
from itertools import groupby
from operator import itemgetter
from typing import Any, Iterable, Iterator

from ....errors import InvalidInputError
from ....semantics.lane_order import lane_sort_key
from ..backend import StoreConnection
from ..queries import get_run, lanes
from ..results import SpanWindow
from . import span_lod

COLUMNS = ["lane", "depth", "name", "start_ns", "end_ns", "count", "span_id", "open"]


def spans_window(conn: StoreConnection, run_id: int, *, from_ns: int, to_ns: int, resolution_ns: int = 0,
                 lane_names: list[str] | None = None, limit: int = 200_000, summary: bool = True) -> SpanWindow:
    """Spans overlapping [from_ns, to_ns), at most about one item per `resolution_ns` per lane and depth.

    Spans at least `resolution_ns` long are kept as they are. Shorter ones that follow each other less
    than `resolution_ns` apart are merged into one busy interval with a count, whatever their names:
    the item is named after its longest span, so a zoomed-out view of dense lanes costs at most one
    item per pixel, not one per span. Open states end at
    `now` and are flagged. Rows: [lane_index, depth, name, start_ns, end_ns, count, span_id (a span shown
    alone and at least `resolution_ns` long: one a pixel can show; zoom in for the others), open].

    Per lane, so that no row carries its lane's name, and the span id only where the span is shown alone: building
    Python strings for 150,000 rows was most of a whole-run view's time. `summary=False` reads the spans whatever
    the resolution (the reference the summary is tested against).
    """
    if to_ns <= from_ns:
        raise InvalidInputError(f"empty window: to_ns ({to_ns}) must be greater than from_ns ({from_ns})")
    if resolution_ns < 0:
        raise InvalidInputError("resolution_ns must be >= 0")
    get_run(conn, run_id)  # (an unknown run: NotFoundError)
    longest = _longest_span(conn, run_id)
    wanted = list(dict.fromkeys(lane_names if lane_names else [x["lane"] for x in lanes(conn, run_id)]))
    args = {"now": time.time_ns(), "res": resolution_ns, "run": run_id, "to": to_ns, "from": from_ns}
    level = span_lod.level_for(resolution_ns) if summary else None
    if level is not None:
        rows_by_lane = span_lod.lane_rows(conn, args, wanted, level, longest or 0)
    else:
        rows_by_lane = _rows_by_lane(conn, args, wanted, longest)
    out_rows: list[list[Any]] = []
    truncated = False
    for lane, rows in rows_by_lane:  # (a lane named twice is read once)
        if not span_lod.merge_lane(lane, rows, resolution_ns, out_rows, limit):
            truncated = True
            break
    lane_list = sorted({r[0] for r in out_rows}, key=lane_sort_key)
    index = {lane: i for i, lane in enumerate(lane_list)}
    spans = [[index[r[0]], r[1], r[2], r[3], r[4], r[5], r[6], r[7]] for r in out_rows]
    spans.sort(key=lambda r: (r[0], r[1], r[3]))
    return {"run_id": run_id, "from_ns": from_ns, "to_ns": to_ns, "resolution_ns": resolution_ns, "lanes": lane_list,
            "columns": COLUMNS, "spans": spans, "truncated": truncated}


def _longest_span(conn: StoreConnection, run_id: int) -> int | None:
    row = conn.execute("SELECT max_span_ns FROM runs WHERE id = ?", (run_id,)).fetchone()
    return None if row is None or row[0] is None else int(row[0])


# (depth, name, start, end, count, longest, span id where alone and at least the resolution long, open)
_WINDOW_COLUMNS = span_lod.SPAN_ITEM
PER_LANE_FROM_NS = 60 * 10**9  # PostgreSQL: windows at least this wide are read lane by lane
_WINDOW_WHERE = "run_id = :run AND start_ns < :to AND coalesce(end_ns, :now) > :from"


def _rows_by_lane(conn: StoreConnection, args: dict[str, Any], wanted: list[str], longest: int | None
                  ) -> Iterator[tuple[str, Iterable[Any]]]:
    """Each wanted lane's window rows in start order, lanes in the order asked: one index range per lane (SQLite:
    in-process, a statement costs nothing; PostgreSQL: the same prepared statement, whose plan walks the covering
    index), except a narrow window on PostgreSQL, where the round trips would cost more than the rows: one statement
    for up to 500 lanes (measured on the 64x64 soak: a whole-run page 278 ms per lane vs 370 ms in one; one step
    60 ms per lane vs 28 ms in one). With the run's longest finished span known, finished spans are read from
    `from` less that on, not from the lane's start."""
    where = _WINDOW_WHERE
    early: dict[str, list[Any]] = {}
    if longest is not None:
        where += " AND start_ns >= :floor"
        args = {**args, "floor": args["from"] - longest}
        # open spans older than the bound
        for r in conn.execute(span_lod.OPEN_SPANS.format(open_index=span_lod.open_index(conn)),
                              {**args, "before": args["floor"]}):
            early.setdefault(r[0], []).append(r[1:])
    for lane, rows in _lane_ranges(conn, args, wanted, where):
        yield lane, (merge(early[lane], rows, key=itemgetter(2)) if lane in early else rows)


def _lane_ranges(conn: StoreConnection, args: dict[str, Any], wanted: list[str], where: str) -> Iterator[tuple[str,
                 Iterable[Any]]]:
    if not conn.dialect.remote or args["to"] - args["from"] >= PER_LANE_FROM_NS:
        sql = f"SELECT {_WINDOW_COLUMNS} FROM spans WHERE {where} AND lane = :lane ORDER BY start_ns"
        for lane in wanted:
            yield lane, conn.execute(sql, {**args, "lane": lane})
        return
    for i in range(0, len(wanted), 500):
        part = wanted[i:i + 500]
        names = {f"lane{k}": lane for k, lane in enumerate(part)}
        rows = conn.execute(f"SELECT lane, {_WINDOW_COLUMNS} FROM spans WHERE {where} AND lane IN "
                            f"({','.join(':' + n for n in names)}) ORDER BY lane, start_ns", {**args, **names})
        grouped = {lane: [r[1:] for r in group] for lane, group in groupby(rows, key=itemgetter(0))}
        for lane in part:
            yield lane, grouped.get(lane, ())

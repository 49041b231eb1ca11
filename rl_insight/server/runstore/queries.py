"""Read side of the run store: runs, metric series (downsampled), spans (merged below a resolution), exports.

Every function takes a read connection; heavy lifting (bucketing, merging) happens inside SQLite so
a 100k-point series or a million spans never become Python objects one by one.
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import time
from typing import Any, Iterable, Iterator, Literal, Mapping, cast

from ...errors import InvalidInputError, NotFoundError
from ...semantics.lane_order import lane_sort_key
from ...semantics.panels import logged_names
from . import step_marks
from .backend import StoreConnection
from .metrics.downsample import lttb, minmax
from .results import Lane, Metric, Number, Run, RunStatus, Series, SeriesPoints, SpanDetail

XAxis = Literal["step", "time"]
MAX_POINTS = 20_000


RUN_COLUMNS = "id, project, experiment_name, first_seen, last_seen, last_step, finished_at, tags, end_state"


# (project, experiment_name) -> what a live run is besides live: "stalled" or "hung" (server/live/run_conditions.py)
Conditions = Mapping[tuple[str, str], RunStatus]


def run_status(row: sqlite3.Row | tuple, now: float, live_window_s: float,
               conditions: Conditions | None = None) -> RunStatus:
    """live (heard from lately: data, or its processes' heartbeats), stalled or hung (live, and `conditions` says
    so), idle (nothing heard lately), finished (its clients said goodbye), or lost (the process logging its steps
    stopped reporting without a word: killed, crashed, its node gone)."""
    last_seen, finished_at = row[4], row[6]
    if finished_at is not None and finished_at >= last_seen - 1e-6:
        return "lost" if len(row) > 8 and row[8] else "finished"
    if now - last_seen > live_window_s:
        return "idle"
    return conditions.get((row[1], row[2]), "live") if conditions else "live"


def _run_dict(row: tuple, now: float, live_window_s: float, conditions: Conditions | None = None) -> Run:
    d: Run = {"id": row[0], "project": row[1], "experiment_name": row[2], "first_seen": row[3], "last_seen": row[4],
         "last_step": row[5], "status": run_status(row, now, live_window_s, conditions),
         "duration_s": max(0.0, row[4] - row[3]), "tags": json.loads(row[7]) if len(row) > 7 and row[7] else []}
    if d["status"] == "lost":
        d["lost"] = json.loads(row[8])  # why, and the lanes that were open
    if len(row) > 9:
        d["config"] = json.loads(row[9]) if row[9] else {}
    return d


def list_runs(
    conn: StoreConnection, live_window_s: float = 60.0, project: str | None = None,
    conditions: Conditions | None = None, seen_since: float | None = None
) -> list[Run]:
    """Every run (of `project`; last seen at or after `seen_since`, unix seconds), the latest seen first."""
    where: list[str] = []
    args: list[object] = []
    if project is not None:
        where.append("project = ?")
        args.append(project)
    if seen_since is not None:
        where.append("last_seen >= ?")
        args.append(seen_since)
    sql = f"SELECT {RUN_COLUMNS} FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
    now = time.time()
    return [_run_dict(r, now, live_window_s, conditions)
            for r in conn.execute(sql + " ORDER BY last_seen DESC", tuple(args))]


def get_run(
    conn: StoreConnection, run_id: int, live_window_s: float = 60.0, include_config: bool = False,
    conditions: Conditions | None = None
) -> Run:
    cols = RUN_COLUMNS + (", config" if include_config else "")
    row = conn.execute(f"SELECT {cols} FROM runs WHERE id = ?", (run_id,)).fetchone()
    if row is None:
        raise NotFoundError(f"no run with id {run_id}", hint="GET /api/v1/runs lists the runs")
    return _run_dict(row, time.time(), live_window_s, conditions)


def open_states(conn: StoreConnection, limit: int) -> list[tuple[str, str, float, bool, tuple]]:
    """States stored as started and never ended, across runs (at boot: what the previous boot left open):
    (project, experiment_name, the run's last_seen, whether the run is marked finished,
    (id, trace_id, parent_id, name, lane, start_ns, attributes))."""
    rows = conn.execute(
        "SELECT r.project, r.experiment_name, r.last_seen, r.finished_at, s.id, s.trace_id, s.parent_id, s.name, "
        "s.lane, s.start_ns, s.attributes FROM runs r JOIN spans s ON s.run_id = r.id AND s.end_ns IS NULL "
        "WHERE s.kind = 'state' LIMIT ?", (limit,))
    return [(p, e, seen, finished is not None, tuple(rest)) for p, e, seen, finished, *rest in rows]


def has_open_spans(conn: StoreConnection, run_id: int) -> bool:
    """Whether any state of the run is still open (the partial index of open spans: one look-up)."""
    return (
        conn.execute("SELECT 1 FROM spans WHERE run_id = ? AND end_ns IS NULL LIMIT 1", (run_id,)).fetchone()
        is not None
    )


def metric_values(conn: StoreConnection, run_id: int, name: str) -> list[tuple[float, float]]:
    """(unix ts, value) of every series of the run named `name` (as stored: sanitized), in time order."""
    rows = conn.execute("SELECT p.ts, p.value FROM samples p JOIN series s ON s.id = p.series_id "
                        "WHERE s.run_id = ? AND s.name = ? ORDER BY p.ts", (run_id, name)).fetchall()
    return [(r[0], r[1]) for r in rows if r[1] is not None]


def stepped_samples(conn: StoreConnection, run_id: int) -> Iterator[tuple[str, str, float, float, float]]:
    """Every sample of a run that has a step and a value: (name, labels JSON, step, ts, value), by step then time,
    read in chunks (a run of millions of samples streams)."""
    cur = conn.execute(
        "SELECT s.name, s.labels, p.step, p.ts, p.value FROM samples p JOIN series s ON s.id = p.series_id "
        "WHERE s.run_id = ? AND p.step IS NOT NULL AND p.value IS NOT NULL ORDER BY p.step, p.ts",
        (run_id,),
    )
    while True:
        rows = cur.fetchmany(5000)
        if not rows:
            return
        yield from rows


def project_of(conn: StoreConnection, run_id: int) -> str | None:
    """The project of a run; None for no such run."""
    row = conn.execute("SELECT project FROM runs WHERE id = ?", (run_id,)).fetchone()
    return None if row is None else str(row[0])


def find_run_id(conn: StoreConnection, project: str, experiment_name: str) -> int | None:
    row = conn.execute(
        "SELECT id FROM runs WHERE project = ? AND experiment_name = ?", (project, experiment_name)
    ).fetchone()
    return None if row is None else int(row[0])


def metric_names(conn: StoreConnection, run_id: int) -> list[Metric]:
    get_run(conn, run_id)
    rows = conn.execute(  # (the totals the writer keeps: runstore/metrics/series_totals.py)
        "SELECT name, kind, labels, n_samples, last_step, logged_name FROM series WHERE run_id = ? ORDER BY name, id",
        (run_id,)).fetchall()
    # `logged`: the name as the job logged it (`actor/entropy`): as sent, else verl's key for a verl trainer metric
    # (verl turns "/" into "_" before it calls the client), else as stored
    verl = logged_names()
    return [{"name": r[0], "kind": r[1], "labels": json.loads(r[2]), "samples": r[3], "last_step": r[4],
             "logged": r[5] or verl.get(r[0], r[0])} for r in rows]


def _check_points(points: int) -> None:
    if not 2 <= points <= MAX_POINTS:
        raise InvalidInputError(f"points must be between 2 and {MAX_POINTS}, got {points}")


def series(conn: StoreConnection, run_id: int, name: str, *, x: XAxis = "step", points: int = 1000,
           agg: Literal["minmax", "lttb", "none"] = "minmax", x_from: float | None = None,
           x_to: float | None = None) -> Series:
    """All label-sets of metric `name` in a run, each downsampled to about `points` points."""
    _check_points(points)
    if x_from is not None and x_to is not None and x_to <= x_from:
        raise InvalidInputError(f"empty window: to ({x_to}) must be greater than from ({x_from})")
    get_run(conn, run_id)
    found = conn.execute("SELECT id, labels, kind FROM series WHERE run_id = ? AND name = ?", (run_id, name)).fetchall()
    if not found:
        raise NotFoundError(f"run {run_id} has no metric {name!r}", hint=f"GET /api/v1/runs/{run_id}/metrics lists "
                                                                         "them")
    col = "step" if x == "step" else "ts"
    out: list[SeriesPoints] = []
    for sid, labels, kind in found:
        where = f"series_id = ? AND {col} IS NOT NULL"
        args: list[Any] = [sid]
        if x_from is not None:
            where += f" AND {col} >= ?"
            args.append(x_from)
        if x_to is not None:
            where += f" AND {col} <= ?"
            args.append(x_to)
        total = conn.execute(f"SELECT count(*), min({col}), max({col}) FROM samples WHERE {where}", args).fetchone()
        n, lo, hi = total
        if n == 0:
            pts: list[list[Number | None]] = []
        elif agg == "none" or n <= points:
            pts = [
                list(r) for r in conn.execute(f"SELECT {col}, value FROM samples WHERE {where} ORDER BY {col}", args)
            ]
        elif agg == "lttb":
            raw = conn.execute(f"SELECT {col}, value FROM samples WHERE {where} ORDER BY {col}", args).fetchall()
            pts = cast(list[list[Number | None]], lttb(raw, points))
        else:
            pts = cast(list[list[Number | None]], minmax(conn, col, where, args, lo, hi, points))
        out.append({"labels": json.loads(labels), "kind": kind, "points": pts, "total": n})
    return {"run_id": run_id, "name": name, "x": x, "agg": agg, "series": out}


def compare(conn: StoreConnection, run_ids: list[int], name: str, **kw: Any) -> list[Series]:
    if not run_ids or len(run_ids) > 20:
        raise InvalidInputError(f"give 1 to 20 run ids to compare, got {len(run_ids)}")
    return [series(conn, r, name, **kw) for r in run_ids]


# ----------------------------------------------------------------------------- spans
_LANE_NAMES = """
WITH RECURSIVE l(lane) AS (
    SELECT min(lane) FROM spans WHERE run_id = :run
    UNION ALL
    SELECT (SELECT min(lane) FROM spans WHERE run_id = :run AND lane > l.lane) FROM l WHERE l.lane IS NOT NULL
)
SELECT lane FROM l WHERE lane IS NOT NULL
"""


def lanes(conn: StoreConnection, run_id: int, counts: bool = False) -> list[Lane]:
    """A run's lanes, sorted by prefix then number. Names come from a loose scan of the lane index (one
    seek per lane, not one step per span); per-lane counts, when asked for, scan every span."""
    get_run(conn, run_id)
    if counts:
        rows = conn.execute("SELECT lane, count(*), min(start_ns), max(coalesce(end_ns, start_ns)), "
                            "sum(end_ns IS NULL) FROM spans WHERE run_id = ? GROUP BY lane", (run_id,)).fetchall()
        out: list[Lane] = [{"lane": r[0], "spans": r[1], "first_ns": r[2], "last_ns": r[3], "open": r[4]}
                           for r in rows]
    else:
        out = [{"lane": r[0]} for r in conn.execute(_LANE_NAMES, {"run": run_id})]
    return sorted(out, key=lambda d: lane_sort_key(d["lane"]))


def span_bounds(conn: StoreConnection, run_id: int, floor_ns: int | None = None) -> tuple[int | None, int | None]:
    """(first start at or after `floor_ns`, last end) of a run's spans from the start-time index: two short index
    walks, no full scan (client clocks may differ from the server's, so the run's first/last_seen alone could hide
    spans)."""
    first = conn.execute("SELECT min(start_ns) FROM spans WHERE run_id = ? AND start_ns >= ?",
                         (run_id, floor_ns if floor_ns is not None else -(2**63))).fetchone()[0]
    last = conn.execute(
        "SELECT max(coalesce(end_ns, start_ns)) FROM (SELECT end_ns, start_ns FROM spans WHERE run_id = ? "
        "ORDER BY start_ns DESC LIMIT 1000)",
        (run_id,),
    ).fetchone()[0]
    return first, last


def spans_before(conn: StoreConnection, run_id: int, floor_ns: int, cap: int = 100_000) -> int:
    """How many of a run's spans start before `floor_ns` (counted up to `cap`: one bounded index range)."""
    return conn.execute("SELECT count(*) FROM (SELECT 1 FROM spans WHERE run_id = ? AND start_ns < ? LIMIT ?)",
                        (run_id, floor_ns, cap)).fetchone()[0]


def span_detail(conn: StoreConnection, run_id: int, span_id: str) -> SpanDetail:
    r = conn.execute("SELECT id, trace_id, parent_id, name, lane, kind, start_ns, end_ns, attributes FROM spans "
                     "WHERE run_id = ? AND id = ?", (run_id, span_id)).fetchone()
    if r is None:
        raise NotFoundError(f"run {run_id} has no span {span_id!r}")
    return {"id": r[0], "trace_id": r[1], "parent_id": r[2], "name": r[3], "lane": r[4], "kind": r[5], "start_ns": r[6],
            "end_ns": r[7], "open": r[7] is None, "attributes": json.loads(r[8])}


def spans_in(conn: StoreConnection, run_id: int, from_ns: int | None = None, to_ns: int | None = None,
             attributes: bool | str | tuple[str, ...] = True) -> list[dict[str, Any]]:
    """Raw spans (for insights and exports). `attributes`: True for all of them, False for none, or the names of
    those wanted (read by the database's JSON functions, so the insights never decode every span's JSON)."""
    names: tuple[str, ...] = (attributes,) if isinstance(attributes, str) else () if isinstance(attributes, bool) \
        else attributes
    keys: list[Any] = []
    if attributes is True:
        attr_sql = "attributes"
    elif not names:
        attr_sql = "NULL"
    else:
        parts = [conn.dialect.json_attribute(n) for n in names]
        attr_sql = ", ".join(sql for sql, _ in parts)
        keys = [key for _, key in parts]
    sql = f"SELECT id, parent_id, name, lane, kind, start_ns, end_ns, {attr_sql} FROM spans WHERE run_id = ?"
    args: list[Any] = [*keys, run_id]
    if to_ns is not None:
        sql += " AND start_ns < ?"
        args.append(to_ns)
    longest = None
    if from_ns is not None:
        sql += " AND (end_ns IS NULL OR end_ns > ?)"
        args.append(from_ns)
        # no finished span is longer than the run's longest, so older starts need not be read (a range
        # on the start index instead of every span since the run began); open spans come from their own index
        row = conn.execute("SELECT max_span_ns FROM runs WHERE id = ?", (run_id,)).fetchone()
        longest = row[0] if row is not None else None
    if longest is not None:
        bounded = sql + " AND start_ns >= ?"
        rows: Any = list(conn.execute(bounded + " ORDER BY start_ns", args + [from_ns - longest]))
        open_sql = sql.replace(
            "FROM spans WHERE", "FROM spans INDEXED BY spans_open WHERE", 1
        )  # the partial index of open spans
        early_open = conn.execute(open_sql + " AND end_ns IS NULL AND start_ns < ? ORDER BY start_ns",
                                  args + [from_ns - longest]).fetchall()
        if early_open:
            rows = sorted(early_open + rows, key=lambda r: r[5])
    else:
        rows = conn.execute(sql + " ORDER BY start_ns", args)
    if attributes is True:
        return [
            {
                "id": r[0],
                "parent_id": r[1],
                "name": r[2],
                "lane": r[3],
                "kind": r[4],
                "start_ns": r[5],
                "end_ns": r[6],
                "attributes": json.loads(r[7]),
            }
            for r in rows
        ]
    return [{"id": r[0], "parent_id": r[1], "name": r[2], "lane": r[3], "kind": r[4], "start_ns": r[5], "end_ns": r[6],
             "attributes": {n: v for n, v in zip(names, r[7:]) if v is not None}} for r in rows]


# ----------------------------------------------------------------------------- exports
def _whole(step: Any) -> Any:
    """A step as people write it: 7, not 7.0 (steps are stored as REAL)."""
    return int(step) if isinstance(step, float) and step.is_integer() else step


def csv_export(conn: StoreConnection, run_id: int, names: list[str] | None = None,
               extra: Iterable[tuple[str, str, Any, float, float]] = ()) -> Iterator[str]:
    """One row per sample: name (as stored, what `names` and Prometheus use), labels, step (a whole number when it is
    one), unix time, value, and `logged_name` (as the job logged it and the UI shows it: `actor/entropy`); then `extra`
    rows (the insight metrics per step, export/points.py)."""
    get_run(conn, run_id)
    verl = logged_names()
    sql = ("SELECT s.name, s.labels, p.step, p.ts, p.value, s.logged_name FROM samples p JOIN series s ON "
           "s.id = p.series_id WHERE s.run_id = ?")
    args: list[Any] = [run_id]
    if names:
        sql += f" AND s.name IN ({','.join('?' * len(names))})"
        args += names
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["name", "labels", "step", "timestamp", "value", "logged_name"])
    yield buf.getvalue()
    cur = conn.execute(sql + " ORDER BY s.name, p.ts", args)
    while True:
        chunk = cur.fetchmany(5000)
        if not chunk:
            break
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerows((name, labels, _whole(step), ts, value, logged or verl.get(name, name))
                    for name, labels, step, ts, value, logged in chunk)
        yield buf.getvalue()
    buf = io.StringIO()
    csv.writer(buf).writerows((name, labels, _whole(step), ts, value, name)
                              for name, labels, step, ts, value in extra)
    if buf.getvalue():
        yield buf.getvalue()


def chrome_trace(conn: StoreConnection, run_id: int, step_metric: str = "training/global_step") -> dict[str, Any]:
    """Chrome trace / Perfetto JSON as one object (tests, small runs); the route streams `chrome_trace_stream`."""
    return json.loads("".join(chrome_trace_stream(conn, run_id, step_metric)))


def chrome_trace_stream(conn: StoreConnection, run_id: int,
                        step_metric: str = "training/global_step") -> Iterator[str]:
    """Chrome trace / Perfetto JSON text, one lane at a time: one process per lane (sorted), nested
    states as nested slices (rl_insight.semantics.perfetto); open states end at export time and carry args.open = true.
    Steps (from the step metric's samples) come first as a `steps` track of `step N` slices, and every slice
    carries `args.step`, the step it began in."""
    import bisect

    from ...semantics.names import sanitize_metric_name
    from ...semantics.perfetto import Slice, build_stream

    run = get_run(conn, run_id)
    now_ns = time.time_ns()
    windows = step_marks.windows(conn, run_id, sanitize_metric_name(step_metric))
    starts = [a for _, a, _ in windows]

    def step_of(t: int) -> int | None:
        i = bisect.bisect_right(starts, t) - 1
        return windows[i][0] if i >= 0 and t < windows[i][2] else None

    step_slices = [Slice("steps", "steps", f"step {n}", "step", a, b, {"step": n}) for n, a, b in windows]

    def lane_slices(lane: str) -> Iterator[Slice]:
        rows = conn.execute("SELECT name, kind, start_ns, end_ns, attributes FROM spans WHERE run_id = ? AND lane = ? "
                            "ORDER BY start_ns", (run_id, lane))
        for name, kind, start, end, attrs in rows:
            args = json.loads(attrs)
            if end is None:
                args["open"] = True
            track = "states" if kind in ("state", "state_child") else kind
            step = step_of(start)
            if step is not None:
                args["step"] = step
            yield Slice(lane or "(no lane)", track, name, kind, start, end if end is not None else now_ns, args)

    lanes_in_order = [d["lane"] for d in lanes(conn, run_id)]
    tracks = [("steps", iter(step_slices))] if step_slices else []
    yield from build_stream([*tracks, *((lane, lane_slices(lane)) for lane in lanes_in_order)],
                            f"{run['project']}/{run['experiment_name']}",
                            {"project": run["project"], "experiment_name": run["experiment_name"]})

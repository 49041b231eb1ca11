"""Read side of the trajectory model: a step's trajectories (sorted, filtered, paged), their distributions,
and one trajectory's waterfall.

Everything is per step and bounded by the step: the index (run_id, step, duration_s) makes a step's
10,000 trajectories one range, so a page costs the same at step 5 and at step 200 of a 2M-trajectory run
(bench/bench_trajectories.py). A trajectory's turns are one primary-key range.
"""

from __future__ import annotations

import json
from typing import Any, Literal, cast

from ....errors import InvalidInputError, NotFoundError
from ..backend import StoreConnection
from ..results import (
    Gap,
    Histogram,
    ReplicaLoad,
    ToolLatency,
    Trajectory,
    TrajectoryDetail,
    TrajectoryPage,
    TrajectoryStats,
    TrajectorySteps,
)
from .index import REQUEST_OF_TURN

SORTS = {
    "duration": "duration_s",
    "turns": "turns",
    "tool_calls": "tool_calls",
    "tool_errors": "tool_errors",
    "reward": "reward",
    "tokens_out": "tokens_out",
    "tokens_in": "tokens_in",
    "start": "start_ns",
    "generate_s": "generate_s",
    "tool_s": "tool_s",
}
Sort = Literal[
    "duration",
    "turns",
    "tool_calls",
    "tool_errors",
    "reward",
    "tokens_in",
    "tokens_out",
    "generate_s",
    "tool_s",
    "start",
]  # the keys of SORTS, for the API's schema (a test checks they match)
FAILED_STATUSES = ("error", "failure", "failed", "aborted", "timeout", "truncated", "capacity_exhausted")
# "failed" = the trajectory ended in one of these statuses; a successful one whose tool calls failed on the way is
# not failed (the agent recovered): it is found with the tool-errors filter instead
FAILED = f"status IN ({', '.join(repr(x) for x in FAILED_STATUSES)})"
TOOL_ERRORS = "tool_errors > 0"
_COLUMNS = (
    "id",
    "key",
    "step",
    "sample",
    "rollout_n",
    "validate",
    "source",
    "status",
    "reward",
    "reported_turns",
    "start_ns",
    "end_ns",
    "duration_s",
    "turns",
    "generates",
    "tool_calls",
    "tool_errors",
    "tokens_in",
    "tokens_out",
    "generate_s",
    "tool_s",
    "replica",
    "tools",
)
_SELECT = "SELECT " + ", ".join(_COLUMNS) + " FROM trajectories"
MAX_STEPS = 5000


def _row(r: tuple) -> Trajectory:
    raw = dict(zip(_COLUMNS, r))
    raw["tools"] = [t for t in (raw["tools"] or "").split(",") if t]  # (stored ",a,b,": instr() finds ",a,")
    d = cast(Trajectory, raw)
    d["validate"] = None if d["validate"] is None else bool(d["validate"])
    return d


def steps(conn: StoreConnection, run_id: int) -> TrajectorySteps:
    """The steps that have trajectories, newest first: one index seek per step (a skip scan written as a recursive
    query, so a PostgreSQL store answers in one round trip, not one per step), not a scan of every trajectory."""
    out = [int(r[0]) for r in conn.execute(
        "WITH RECURSIVE s(step, n) AS (SELECT max(step), 1 FROM trajectories WHERE run_id = ? UNION ALL "
        "SELECT (SELECT max(step) FROM trajectories WHERE run_id = ? AND step < s.step), s.n + 1 FROM s "
        "WHERE s.step IS NOT NULL AND s.n < ?) SELECT step FROM s WHERE step IS NOT NULL", (run_id, run_id, MAX_STEPS))]
    without = (
        conn.execute("SELECT 1 FROM trajectories WHERE run_id = ? AND step IS NULL LIMIT 1", (run_id,)).fetchone()
        is not None
    )
    return {"steps": out, "without_step": without}


def _step_clause(step: int | None) -> tuple[str, tuple]:
    return ("step IS NULL", ()) if step is None else ("step = ?", (step,))


def page(conn: StoreConnection, run_id: int, step: int | None, *, sort: str = "duration", descending: bool = True,
         status: str | None = None, tool: str | None = None, replica: str | None = None, failed: bool = False,
         tool_errors: bool = False, min_turns: int | None = None, sample: str | None = None, offset: int = 0,
         limit: int = 50) -> TrajectoryPage:
    """One page of a step's trajectories and how many match (`step` None: those without a step)."""
    column = SORTS.get(sort)
    if column is None:
        raise InvalidInputError(f"sort must be one of {sorted(SORTS)}, got {sort!r}")
    clause, args = _step_clause(step)
    where, params = ["run_id = ?", clause], [run_id, *args]
    if status:
        where.append("status = ?")
        params.append(status)
    if tool:
        where.append("instr(tools, ?) > 0")
        params.append(f",{tool},")
    if replica:
        where.append("replica = ?")
        params.append(replica)
    if sample:  # a sample's trajectories: its rollout group (GRPO's n responses to one prompt)
        where.append("sample = ?")
        params.append(sample)
    if failed:
        where.append(FAILED)
    if tool_errors:
        where.append(TOOL_ERRORS)
    if min_turns is not None:
        where.append("turns >= ?")
        params.append(min_turns)
    sql_where = " WHERE " + " AND ".join(where)
    order = "DESC" if descending else "ASC"
    # missing values (no reward reported) sort last either way
    rows = conn.execute(f"{_SELECT}{sql_where} ORDER BY {column} IS NULL, {column} {order}, id LIMIT ? OFFSET ?",
                        (*params, limit, offset)).fetchall()
    total = conn.execute(f"SELECT count(*) FROM trajectories{sql_where}", params).fetchone()[0]
    return {"step": step, "total": total, "offset": offset, "limit": limit, "sort": sort, "descending": descending,
            "trajectories": [_row(r) for r in rows]}


def _quantile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[i]


def _histogram(values: list[float], bins: int = 20, integer: bool = False) -> Histogram:
    """Equal-width bins over [min, max] (integers: one bin per value while they fit). Computed on halves, so
    that values at both ends of the float range (±1.7e308: max - min overflows) still bin; non-finite skipped."""
    values = [v for v in values if v - v == 0.0]
    if not values:
        return {"edges": [], "counts": []}
    lo, hi = min(values), max(values)
    if lo == hi:
        return {"edges": [lo, lo + 1 if integer else lo], "counts": [len(values)]}
    half_span = hi / 2 - lo / 2  # finite for any two finite floats
    if integer and half_span <= (bins - 1) / 2:
        edges = [lo + i for i in range(int(hi - lo) + 2)]
    else:
        step = half_span / bins  # half a bin's width
        edges = [(lo + i * step) + i * step if i < bins else hi for i in range(bins + 1)]  # never past the float range
    counts = [0] * (len(edges) - 1)
    n = len(counts)
    top = edges[-1] / 2 - edges[0] / 2
    for v in values:
        counts[min(n - 1, max(0, int((v / 2 - lo / 2) / top * n)))] += 1
    return {"edges": edges, "counts": counts}


# (the cast: on PostgreSQL a BIGINT over 1e9 is NUMERIC, read back through a Python loader, 5x slower than a double)
_TOOL_COLUMNS = "t.name, CAST(t.end_ns - t.start_ns AS DOUBLE) / 1e9, t.error IS NOT NULL"
_TOOL_TURNS = {
    False: f"SELECT {_TOOL_COLUMNS} FROM trajectories j JOIN turns t ON t.traj = j.id WHERE j.run_id = ? AND "
           "j.{clause} AND t.kind = 'tool'",
    # a planner that needs a fence (PostgreSQL's, costing each trajectory's turn lookup high, scanned the run's
    # trajectories in parallel by their key instead of the step's index: 150 vs 120 ms at 600k trajectories): the
    # step's trajectories first
    True: "WITH j AS MATERIALIZED (SELECT id FROM trajectories WHERE run_id = ? AND {clause}) "
          f"SELECT {_TOOL_COLUMNS} FROM j JOIN turns t ON t.traj = j.id WHERE t.kind = 'tool'",
}


def stats(conn: StoreConnection, run_id: int, step: int | None) -> TrajectoryStats:
    """A step's distributions: duration quantiles, turns, rewards and tokens per trajectory, tool latency
    by tool, trajectories by replica and by status."""
    clause, args = _step_clause(step)
    rows = conn.execute(
        f"SELECT id, duration_s, turns, reward, tokens_out, replica, status, tool_errors FROM trajectories "
        f"WHERE run_id = ? AND {clause}",
        (run_id, *args),
    ).fetchall()
    durations = sorted(r[1] for r in rows if r[1] is not None)
    by_replica: dict[str, list[float]] = {}
    by_status: dict[str, int] = {}
    for r in rows:
        if r[5] is not None:
            by_replica.setdefault(r[5], []).append(r[1] or 0.0)
        by_status[r[6] or "unknown"] = by_status.get(r[6] or "unknown", 0) + 1
    tools: dict[str, list[float]] = {}
    errors: dict[str, int] = {}
    # one range of the turns' primary key per trajectory, reading only the tool turns
    tool_turns = conn.execute(_TOOL_TURNS[conn.dialect.fence_ctes].format(clause=clause), (run_id, *args)).fetchall()
    for name, dur, err in tool_turns:
        tools.setdefault(name, []).append(dur)
        errors[name] = errors.get(name, 0) + err
    tool_rows: list[ToolLatency] = []
    for name, values in tools.items():
        values.sort()
        tool_rows.append({"tool": name, "calls": len(values), "errors": errors[name], "p50_s": _quantile(values, 0.5),
                          "p99_s": _quantile(values, 0.99), "max_s": values[-1]})
    tool_rows.sort(key=lambda t: -float(t["p99_s"] or 0))
    replicas = sorted(
        (ReplicaLoad(replica=k, trajectories=len(v), max_s=max(v), total_s=sum(v)) for k, v in by_replica.items()),
        key=lambda x: -float(x["max_s"]),
    )
    return {
        "step": step,
        "trajectories": len(rows),
        "duration_s": {
            "p50": _quantile(durations, 0.5),
            "p90": _quantile(durations, 0.9),
            "p99": _quantile(durations, 0.99),
            "max": durations[-1] if durations else None,
        },
        "turns": _histogram([r[2] for r in rows], integer=True),
        "reward": _histogram([r[3] for r in rows if r[3] is not None]),
        "tokens_out": _histogram([r[4] for r in rows if r[4] is not None]),
        "duration": _histogram(durations),
        "tools": tool_rows,
        "replicas": replicas,
        "statuses": by_status,
        "failed": sum(1 for r in rows if (r[6] or "") in FAILED_STATUSES),
        "with_tool_errors": sum(1 for r in rows if (r[7] or 0) > 0),
    }


TEXT_PER_ANSWER = 2 << 20  # characters of turn text (prompts, responses, tool payloads) one trajectory answer holds
TEXTS = ("prompt", "response", "tool_args", "tool_result", "input", "output")


def _detail(stored: str | None, budget: list[int]) -> dict[str, Any]:
    """A turn's stored detail; its texts while the answer's budget lasts (10,000 turns of 4 KiB texts would be a
    160 MB answer), then `text_left_out`. A detail stored cut by an older version (not JSON) reads as none."""
    if not stored:
        return {}
    try:
        d = json.loads(stored)
    except ValueError:
        return {}
    if not isinstance(d, dict):
        return {}
    size = sum(len(d[k]) for k in TEXTS if isinstance(d.get(k), str))
    if size > budget[0]:
        for k in TEXTS:
            d.pop(k, None)
        d["text_left_out"] = True
    else:
        budget[0] -= size
    return d


def detail(conn: StoreConnection, run_id: int, traj_id: int) -> TrajectoryDetail:
    """One trajectory and its turns in time order, each with its engine request when one is known (queue,
    prefill, decode), and the gaps between turns (time no turn was running)."""
    row = conn.execute(f"{_SELECT} WHERE run_id = ? AND id = ?", (run_id, traj_id)).fetchone()
    if row is None:
        raise NotFoundError(f"run {run_id} has no trajectory {traj_id}")
    traj = _row(row)
    turns = []
    budget = [TEXT_PER_ANSWER]
    for (
        start,
        end,
        span_id,
        kind,
        name,
        step,
        replica,
        tok_in,
        tok_out,
        error,
        request_id,
        detail_json,
        r_replica,
        queue_s,
        ttft_s,
        prefill_s,
        decode_s,
        r_in,
        r_out,
    ) in conn.execute(
        "SELECT t.start_ns, t.end_ns, t.span_id, t.kind, t.name, t.step, t.replica, t.tokens_in, t.tokens_out, "
        "t.error, t.request_id, "
        "t.detail, r.replica, r.queue_s, r.ttft_s, r.prefill_s, r.decode_s, r.tokens_in, r.tokens_out FROM turns t "
        f"{REQUEST_OF_TURN} WHERE t.traj = ?2 ORDER BY t.start_ns, t.span_id LIMIT 10000",
        (run_id, traj_id),
    ):
        turns.append({"start_ns": start, "end_ns": end, "span_id": span_id, "kind": kind, "name": name, "step": step,
                      "replica": replica or r_replica, "tokens_in": tok_in if tok_in is not None else r_in,
                      "tokens_out": tok_out if tok_out is not None else r_out, "error": error, "request_id": request_id,
                      "detail": _detail(detail_json, budget),
                      "engine": None if queue_s is None and prefill_s is None and decode_s is None else
                      {"queue_s": queue_s, "ttft_s": ttft_s, "prefill_s": prefill_s, "decode_s": decode_s}})
    gaps: list[Gap] = []
    busy_until = traj["start_ns"]
    for t in turns:
        if busy_until is not None and t["start_ns"] > busy_until:
            gaps.append({"start_ns": busy_until, "end_ns": t["start_ns"]})
        busy_until = max(busy_until or t["end_ns"], t["end_ns"])
    return {**traj, "turn_list": turns, "gaps": gaps, "gap_s": sum(g["end_ns"] - g["start_ns"] for g in gaps) / 1e9}

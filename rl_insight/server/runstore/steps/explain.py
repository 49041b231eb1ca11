"""Explaining steps from the run store: one step's critical path and what-if (from its spans: one step is small),
and any window's per-step facts, savings and run diffs from the stored per-step rows (step_stats.py), never a
rescan of the window's spans. Steps not summarized yet (the newest, or more than `FALLBACK_STEPS` of an older
version) are computed from their spans, the rest listed as pending.
"""

from __future__ import annotations

from typing import Any

from ....semantics import critical_path as cp
from ....semantics import insights, run_diff
from .. import queries as q
from ..backend import StoreConnection
from .step_stats import path_rows, step_rows, step_trajectories

FALLBACK_STEPS = 50  # steps a request computes from spans when their stored rows are missing
FACT_LANES = ("", "@gen", "@cp", "@cplane", "@whatif")


def step_path(conn: StoreConnection, run_id: int, window: tuple[int, int, int], now_ns: int, *,
              cut_percent: float | None = None,
              stage: str | None = None, faster_percent: float | None = None) -> dict[str, Any]:
    """One step's critical path (every element, its slack, the gaps), its what-if savings and, in an agent-loop
    step, the critical trajectory."""
    step, a, b = window
    spans = q.spans_in(conn, run_id, a, b, attributes=False)
    path = cp.critical_path(spans, a, b, now_ns)
    trajectories = step_trajectories(conn, run_id, step)
    items = cp.generation_items(spans, a, b, now_ns, trajectories)
    out = {"step": step, **path,
           "what_if": cp.what_if(path, items, cut_percent=cut_percent, stage=stage, faster_percent=faster_percent)}
    gen_on_path = [e for e in path["elements"] if e["lane"] in items]
    if trajectories and gen_on_path:  # the trajectory that kept the path's replica busy longest
        last = max(gen_on_path, key=lambda e: e["end_ns"])
        row = conn.execute(
            "SELECT id, key, turns, duration_s FROM trajectories WHERE run_id = ? AND step = ? AND replica = ? "
            "ORDER BY end_ns DESC LIMIT 1", (run_id, step, last["lane"])).fetchone()
        if row:
            out["critical_trajectory"] = {"id": row[0], "key": row[1], "turns": row[2], "duration_s": row[3]}
    return out


def step_facts(conn: StoreConnection, run_id: int, windows: list[tuple[int, int, int]],
               now_ns: int, per_lane: bool = True) -> tuple[dict[int, dict], list[int]]:
    """Per-step facts (run_diff's shape, plus "whatif") of the given windows from the stored rows; steps without them
    computed from spans up to FALLBACK_STEPS; the others returned as pending. `per_lane=False` leaves out each
    lane's busy and generation rows (most of the rows: a diff sums them in SQL instead, lane_sums)."""
    facts: dict[int, dict[str, Any]] = {}
    bounds = {s: (a, b) for s, a, b in windows}
    wanted = list(bounds)
    for i in range(0, len(wanted), 500):
        part = wanted[i:i + 500]
        marks = ",".join("?" * len(part))
        lanes = FACT_LANES if per_lane else tuple(x for x in FACT_LANES if x != "@gen")
        for step, lane, name, value in conn.execute(
                f"SELECT step, lane, name, value FROM step_stats WHERE run_id = ? AND step IN ({marks}) "
                f"AND (lane IN ({','.join('?' * len(lanes))}){' OR name = ' + repr('') if per_lane else ''})",
                (run_id, *part, *lanes)):
            f = facts.setdefault(step, _empty(bounds[step]))
            if lane == "":
                f["states"][name] = value
            elif name == "" and not lane.startswith("@"):
                f["lanes"][lane] = value
            else:
                f[{"@gen": "gen", "@cp": "cp", "@cplane": "cplane", "@whatif": "whatif"}[lane]][name] = value
    missing = [s for s in wanted if s not in facts or "bubbles" not in facts[s]["whatif"]]
    for step in missing[:FALLBACK_STEPS]:
        a, b = bounds[step]
        spans = q.spans_in(conn, run_id, a, b, attributes=False)
        f = facts[step] = _empty((a, b))
        for lane, name, value in step_rows(spans, step, a, b, now_ns, []) + path_rows(conn, run_id, step, a, b, spans,
                                                                                        now_ns):
            if lane == "":
                f["states"][name] = value
            elif name == "" and not lane.startswith("@"):
                f["lanes"][lane] = value
            elif lane in ("@gen", "@cp", "@cplane", "@whatif"):
                f[lane[1:]][name] = value
    return facts, missing[FALLBACK_STEPS:]


def _empty(bounds: tuple[int, int]) -> dict[str, Any]:
    a, b = bounds
    return {"start_ns": a, "end_ns": b, "duration_s": (b - a) / insights.NS, "states": {}, "lanes": {}, "gen": {},
            "cp": {}, "cplane": {}, "whatif": {}}


def lane_sums(conn: StoreConnection, run_id: int, steps: list[int], facts: dict[int, dict]) -> dict[str, Any]:
    """run_diff.lane_summary over `steps`, summed in SQL from the stored rows (steps computed from spans, in
    `facts` with their per-lane parts, are added from there)."""
    out: dict[str, Any] = {"busy": {}, "gen": {}, "slowest": {}, "gen_steps": 0}
    stored = [s for s in steps if not facts.get(s, {}).get("lanes")]
    for i in range(0, len(stored), 500):
        part = stored[i:i + 500]
        marks = ",".join("?" * len(part))
        for lane, total in conn.execute(
                f"SELECT lane, sum(value) FROM step_stats WHERE run_id = ? AND step IN ({marks}) AND name = '' "
                "AND lane != '' AND lane NOT LIKE '@%' GROUP BY lane", (run_id, *part)):
            out["busy"][lane] = out["busy"].get(lane, 0.0) + total
        for lane, total in conn.execute(
                f"SELECT name, sum(value) FROM step_stats WHERE run_id = ? AND step IN ({marks}) AND lane = '@gen' "
                "GROUP BY name", (run_id, *part)):
            out["gen"][lane] = out["gen"].get(lane, 0.0) + total
        # the slowest rollout lane of each step with two or more (ties: the first by name)
        for lane, _ in conn.execute(
                "SELECT name, value FROM (SELECT name, value, row_number() OVER (PARTITION BY step ORDER BY "
                "value DESC, name) AS rn, count(*) OVER (PARTITION BY step) AS n FROM step_stats WHERE run_id = ? "
                "AND step IN "
                f"({marks}) AND lane = '@gen') WHERE rn = 1 AND n >= 2", (run_id, *part)):
            out["slowest"][lane] = out["slowest"].get(lane, 0) + 1
            out["gen_steps"] += 1
    computed = run_diff.lane_summary([s for s in steps if s not in stored], facts)
    for key in ("busy", "gen", "slowest"):
        for k, v in computed[key].items():
            out[key][k] = out[key].get(k, 0) + v
    out["gen_steps"] += computed["gen_steps"]
    return out


def runs_diff(conn: StoreConnection, a: tuple[int, list[tuple[int, int, int]], str], b: tuple[int, list[tuple[int,
              int, int]], str],
              now_ns: int, by_position: bool = False) -> dict[str, Any]:
    """run_diff.diff of two (run id, windows, name) from their stored per-step facts, with each side's savings.
    `by_position`: two windows (of one run or two) aligned by their order, B's steps numbered as A's."""
    fa, pending_a = step_facts(conn, a[0], a[1], now_ns, per_lane=False)
    fb, pending_b = step_facts(conn, b[0], b[1], now_ns, per_lane=False)
    if by_position:
        pairs = list(zip(sorted(fa), sorted(fb)))
        sums_a = lane_sums(conn, a[0], [x for x, _ in pairs], fa)
        sums_b = lane_sums(conn, b[0], [y for _, y in pairs], fb)
        fa, fb = {x: fa[x] for x, _ in pairs}, {x: fb[y] for x, y in pairs}
    else:
        aligned = sorted(set(fa) & set(fb))
        sums_a, sums_b = lane_sums(conn, a[0], aligned, fa), lane_sums(conn, b[0], aligned, fb)
    d = run_diff.diff(fa, fb, (a[2], b[2]), sums_a, sums_b)
    d["pending_steps"] = {"a": len(pending_a), "b": len(pending_b)}
    sb = run_diff.savings(fb)
    d["savings_b"] = sb
    if sb["biggest"]:
        d["sentence"] += f" The biggest single fix in {b[2]}: {run_diff.describe(sb['biggest'])}, about " \
                         f"{sb['what_if'][sb['biggest']]['median_s']:.2f} s a step (estimate)."
    return d

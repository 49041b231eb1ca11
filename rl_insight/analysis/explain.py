"""Offline: each step's critical path and what-if savings, and the diff of two traces, from the event table — the
same pure implementations as the server (semantics/critical_path.py, semantics/run_diff.py), fed from the
analysis' stages (a step is the events its files say belong to it: in async traces steps overlap in time)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..semantics import critical_path as cp
from ..semantics import insights as ins
from ..semantics import run_diff
from .analyze import NS, _stage_groups_by_step, as_spans


def step_facts(df: pd.DataFrame) -> dict[int, dict[str, Any]]:
    """Per step: run_diff's facts, the what-if savings, and the critical path itself ("path")."""
    out: dict[int, dict[str, Any]] = {}
    for step, g in _stage_groups_by_step(df):
        a, b = int(g["start_ns"].min()), int(g["end_ns"].max())
        spans = as_spans(g)
        path = cp.critical_path(spans, a, b, now_ns=b)
        items = cp.generation_items(spans, a, b, b)
        rows = cp.step_whatif_rows(path, items)
        out[step] = {
            "start_ns": a, "end_ns": b, "duration_s": (b - a) / NS,
            "states": ins.step_breakdown(spans, [(step, a, b)], b)[0]["states"],
            "gen": {lane: ins.length(iv.iv) / NS for lane, iv in ins.generation_lanes(spans, b).items()},
            "lanes": {lane: v["busy_s"] for lane, v in ins.lane_utilization(spans, a, b, b).items()},
            "cp": path["by_stage"], "cplane": path["by_lane"],
            "whatif": {name: v for lane, name, v in rows if lane == "@whatif"}, "path": path,
        }
    return out


def critical_paths(facts: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The report's per-step rows: the chain, the idle time on it, the what-if savings."""
    return [{"step": s, "start_ns": f["start_ns"], "end_ns": f["end_ns"], "duration_s": f["duration_s"],
             "chain": [(e["lane"], e["name"], e["seconds"]) for e in f["path"]["elements"]],
             "bubbles_s": f["path"]["bubbles_s"], **{f"{k}_s": v for k, v in f["whatif"].items()}}
            for s, f in sorted(facts.items())]


def compare(a: dict[int, dict[str, Any]], b: dict[int, dict[str, Any]], names: tuple[str, str]) -> dict[str, Any]:
    """run_diff.diff of two traces' step facts, with the biggest single fix in the second."""
    d = run_diff.diff(a, b, names)
    sb = run_diff.savings(b)
    d["savings_b"] = sb
    if sb["biggest"]:
        d["sentence"] += (f" The biggest single fix in {names[1]}: {run_diff.describe(sb['biggest'])}, about "
                          f"{sb['what_if'][sb['biggest']]['median_s']:.2f} s a step (estimate).")
    return d

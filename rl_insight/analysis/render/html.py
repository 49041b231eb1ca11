"""Interactive HTML timeline in one self-contained file (no CDN): rows are role/rank lanes, colour per
stage, hover with details, wheel zoom and drag pan. Levels of detail are embedded: events narrower
than each level's resolution are merged, so a million-event trace opens quickly; the browser draws
the level that matches the current zoom."""

from __future__ import annotations

import html
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from ...semantics.lane_order import lane_sort_key
from .merge import MIXED, merge_below

FULL_DETAIL_LIMIT = 300_000  # events embedded unmerged at the finest level when there are at most this many
LEGEND_OPERATORS = 12  # operators and kernels named in the legend (those with the most time); the tables list the rest
STAGE_CATEGORY = "annotation"  # user ranges (verl's stages, trace_state); every other category is the profiler's


def legend_groups(df: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(stages in name order, operators and kernels by time spent, most first). A name recorded as a stage anywhere is
    a stage; a table without categories is all stages."""
    if "category" not in df:
        return sorted({str(x) for x in df["name"].unique()}), []
    names = df["name"].astype(str)
    is_stage = df["category"].astype(str) == STAGE_CATEGORY
    stages = set(names[is_stage].unique())
    rest = df[~names.isin(stages)]
    spent = (rest["end_ns"] - rest["start_ns"]).groupby(rest["name"].astype(str), observed=True).sum()
    operators = [str(n) for n, _ in sorted(spent.items(), key=lambda kv: (-kv[1], kv[0]))]
    return sorted(stages), operators


def _rows(df: pd.DataFrame, t0: int, lane_index: dict[str, int], name_index: dict[str, int]) -> list[list]:
    lanes = [lane_index[str(x)] for x in df["lane"]]
    names = [name_index[x] for x in df["name"]]
    start = ((df["start_ns"] - t0) / 1e6).round(4).tolist()
    dur = ((df["end_ns"] - df["start_ns"]) / 1e6).round(4).tolist()
    counts = df["count"].tolist() if "count" in df else [1] * len(df)
    return [list(r) for r in zip(lanes, df["depth"].astype(int).tolist(), names, start, dur, counts)]


def render(df: pd.DataFrame, out: Path, title: str = "RL timeline", width_px: int = 3000,
           result: dict | None = None) -> Path:
    """The report: the timeline (levels of detail, nested depth rows, step boundaries, search) and, with
    `result` (analyze.summarize), every analysis table, each row linked to its place on the timeline."""
    if df.empty:
        raise ValueError("no events to draw")
    t0, t1 = int(df["start_ns"].min()), int(df["end_ns"].max())
    span = max(1, t1 - t0)
    lanes = sorted({str(x) for x in df["lane"].unique()}, key=lane_sort_key)
    names = sorted({str(x) for x in df["name"].unique()} | {MIXED})
    lane_index = {n: i for i, n in enumerate(lanes)}
    name_index = {n: i for i, n in enumerate(names)}
    levels: list[dict[str, Any]] = []
    for k in range(4):
        res = span // (width_px * 4 ** k)
        if k == 3 and len(df) <= FULL_DETAIL_LIMIT:
            levels.append({"label": "full detail", "resolution_ms": 0.0, "rows": _rows(df, t0, lane_index, name_index)})
            break
        merged = merge_below(df, max(1, res))
        levels.append({"label": f"merged below {res / 1e6:.3g} ms", "resolution_ms": res / 1e6,
                       "rows": _rows(merged, t0, lane_index, name_index)})
        if len(merged) == len(df):
            break  # nothing merges any more: finer levels would be copies
    levels.sort(key=lambda L: -L["resolution_ms"])
    from ...semantics.palette import MIXED as MIXED_COLOR
    from ...semantics.palette import color_of, operator_color_of
    from .report_tables import tables

    depth = df.groupby(df["lane"].astype(str), observed=True)["depth"].max()
    steps = (
        []
        if result is None
        else [
            [s["step"], round((s["start_ns"] - t0) / 1e6, 4), round((s["end_ns"] - t0) / 1e6, 4)]
            for s in result.get("steps", [])
            if df["step"].notna().any()
        ]
    )
    stages, operators = legend_groups(df)
    colors = [MIXED_COLOR if n == MIXED else color_of(n) if n in stages else operator_color_of(n) for n in names]
    data = {"title": title, "events": int(len(df)), "span_ms": span / 1e6, "t0_ns": t0, "lanes": lanes, "names": names,
            "colors": colors, "legend": {"stages": [name_index[n] for n in stages],
                                         "operators": [name_index[n] for n in operators[:LEGEND_OPERATORS]],
                                         "more_operators": max(0, len(operators) - LEGEND_OPERATORS)},
            "levels": levels,
            "lane_depth": [int(min(3, depth.get(lane, 0))) for lane in lanes], "steps": steps,
            "tables": tables(df, result, t0) if result is not None else []}
    template = resources.files("rl_insight.analysis.render").joinpath("timeline.html").read_text()
    out.write_text(fill_template(template, title, data), encoding="utf-8")
    return out


def script_json(data: object) -> str:
    """JSON safe inside a <script> element: no `<`, `>` or `&` (so no `</script>`, `<!--`, `<script`),
    and no U+2028/2029; undecodable characters (lone surrogates) replaced."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    for ch, esc in _SCRIPT_ESCAPES.items():
        text = text.replace(ch, esc)
    return text.encode("utf-8", "replace").decode("utf-8")


_SCRIPT_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def fill_template(template: str, title: str, data: object) -> str:
    """Substitute the placeholders in one pass: text that came from the input (a file named
    `__DATA__…`, an event name) is never scanned for placeholders again."""
    values = {"__TITLE__": html.escape(title).encode("utf-8", "replace").decode("utf-8"), "__DATA__": script_json(data)}
    return re.sub(r"__TITLE__|__DATA__", lambda m: values[m.group(0)], template)

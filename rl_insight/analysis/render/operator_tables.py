"""The HTML report's operator and kernel tables (analysis/operators.py's result): where a profiled window's time went,
as torch's `key_averages()` lists it. Each row links to that operator's longest call on the timeline.

Invariant: a row's place is one real event of that name (its lane and its start and end); a name the event table does
not hold (cut to 300 characters in the result) links to the whole trace.
"""

from __future__ import annotations

from typing import Any, Callable

import pandas as pd

OPERATOR_CATEGORIES = ("op",)
KERNEL_CATEGORIES = ("kernel", "communication")


def _longest(df: pd.DataFrame, categories: tuple[str, ...]) -> dict[str, tuple[str, int, int]]:
    """name -> (lane, start, end) of its longest event among these categories."""
    if df.empty or "category" not in df:
        return {}
    part = df[df["category"].astype(str).isin(categories)]
    if part.empty:
        return {}
    dur = part["end_ns"].astype("int64") - part["start_ns"].astype("int64")
    idx = dur.groupby(part["name"].astype(str), observed=True).idxmax()
    rows = part.loc[idx.to_numpy(), ["name", "lane", "start_ns", "end_ns"]]
    return {str(n): (str(lane), int(s), int(e)) for n, lane, s, e in rows.itertuples(index=False)}


def operator_tables(df: pd.DataFrame, result: dict[str, Any], ms: Callable[[int], float],
                    whole: tuple[float, float]) -> list[dict[str, Any]]:
    ops = result.get("operators") or {}
    in_ms = lambda seconds: round(float(seconds) * 1e3, 3)  # noqa: E731 - a one-line formatter (operators are short)
    out: list[dict[str, Any]] = []

    def place(where: dict[str, tuple[str, int, int]], name: str) -> dict[str, Any]:
        hit = where.get(name)
        if hit is None:
            return {"lane": None, "from": whole[0], "to": whole[1]}
        lane, s, e = hit
        return {"lane": lane, "from": ms(s), "to": ms(e)}

    where = _longest(df, OPERATOR_CATEGORIES)
    out.append({"id": "operators", "title": "CPU operators by self time (self: minus the operators it called)",
                "columns": ["operator", "calls", "self (ms)", "total (ms)", "self %", "communication",
                            "peak allocated (GiB)"],
                "rows": [{"cells": [r["name"], r["calls"], in_ms(r["self_s"]), in_ms(r["total_s"]),
                                    round(r["self_pct"], 1),
                                    "yes" if r["comm"] else "", None if r.get("peak_allocated_bytes") is None
                                    else round(r["peak_allocated_bytes"] / 2**30, 3)],
                          **place(where, r["name"])} for r in ops.get("operators", [])]})
    where = _longest(df, KERNEL_CATEGORIES)
    out.append({"id": "kernels", "title": "Device kernels by time",
                "columns": ["kernel", "calls", "total (ms)", "mean (µs)", "max (µs)", "share %", "communication"],
                "rows": [{"cells": [r["name"], r["calls"], in_ms(r["total_s"]), round(r["mean_us"], 1),
                                    round(r["max_us"], 1), round(r["share_pct"], 1), "yes" if r["comm"] else ""],
                          **place(where, r["name"])} for r in ops.get("kernels", [])]})
    return out

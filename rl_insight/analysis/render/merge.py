"""Merge events narrower than a resolution so a million-event trace draws quickly (shared by HTML and PNG)."""

from __future__ import annotations

import numpy as np
import pandas as pd

MIXED = "(mixed)"


def merge_below(df: pd.DataFrame, resolution_ns: int) -> pd.DataFrame:
    """Consecutive events of a lane and depth, each shorter than `resolution_ns` and less than that apart,
    become one event with `count` > 1 (named after them, or `(mixed)` when they differ: at that zoom
    their colours could not be told apart anyway). Longer events are kept as they are."""
    if df.empty:
        return df.assign(count=np.array([], dtype="int64"))
    d = df.sort_values(["lane", "depth", "start_ns"], kind="stable")
    lane = d["lane"].cat.codes.to_numpy() if hasattr(d["lane"], "cat") else pd.factorize(d["lane"])[0]
    depth = d["depth"].to_numpy()
    name = pd.factorize(d["name"])[0]
    start, end = d["start_ns"].to_numpy(), d["end_ns"].to_numpy()
    short = (end - start) < resolution_ns
    n = len(d)
    same = np.zeros(n, dtype=bool)
    if n > 1:
        same[1:] = ((lane[1:] == lane[:-1]) & (depth[1:] == depth[:-1])
                    & short[1:] & short[:-1] & ((start[1:] - end[:-1]) <= resolution_ns))
    group = np.cumsum(~same) - 1
    agg = pd.DataFrame({"g": group, "start_ns": start, "end_ns": end, "name": name}).groupby("g").agg(
        start_ns=("start_ns", "min"), end_ns=("end_ns", "max"), count=("start_ns", "size"), kinds=("name", "nunique"))
    first = np.flatnonzero(~same)
    out = d.iloc[first].reset_index(drop=True).copy()
    out["start_ns"] = agg["start_ns"].to_numpy()
    out["end_ns"] = agg["end_ns"].to_numpy()
    out["count"] = agg["count"].to_numpy()
    mixed = agg["kinds"].to_numpy() > 1
    if mixed.any():
        names = out["name"].astype(object).to_numpy(copy=True)  # pandas 3 hands out read-only views
        names[mixed] = MIXED
        out["name"] = names
    return out

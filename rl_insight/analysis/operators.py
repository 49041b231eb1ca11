"""Where a profiled window's time went by operator and kernel, as torch's `key_averages()` and HTA's kernel breakdown
say it: CPU operators by self time (their time minus their child operators'), device kernels by time, call counts,
whether each is communication or compute, and the peak memory allocated while an operator ran where the trace
recorded memory. A pure function of the event table (table.py); plotting and HTML are elsewhere.

Invariants: an operator's self time is its span minus its direct child operators' spans on the same lane, so the
operators' self times add up to the time covered by operators (never more than the window, never counted twice);
a kernel's time is its own span (kernels of a stream do not nest); communication is the table's `communication`
category, or a name of a collective library (NCCL, HCCL, gloo, c10d).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

NS = 1e9
COMM_WORDS = ("nccl", "hccl", "gloo", "c10d::", "all_reduce", "allreduce", "all_gather", "allgather",
              "reduce_scatter", "reducescatter", "broadcast", "all_to_all", "alltoall", "send", "recv")
MAX_MEMORY_INSTANCES = 20_000  # operator calls looked up in the memory samples (the top operators' first calls)


def is_comm(name: str, category: str) -> bool:
    if category == "communication":
        return True
    low = name.lower()
    return any(w in low for w in COMM_WORDS)


def _self_times(starts: list[int], ends: list[int], names: list[str] | None = None) -> list[int | None]:
    """Each interval's length minus its direct children's, for intervals sorted by (start, -end). An interval nested
    directly in one of the same name (the dispatcher entering an operator twice: `aten::mean` in `aten::mean`) is one
    call, as torch's key_averages counts it: None, its time its parent's, its children its parent's children."""
    selfs: list[int | None] = [e - s for s, e in zip(starts, ends)]
    stack: list[int] = []
    for i, (s, e) in enumerate(zip(starts, ends)):
        while stack and ends[stack[-1]] <= s:
            stack.pop()
        if stack and names is not None and names[stack[-1]] == names[i]:
            selfs[i] = None  # the same call, entered again
            continue
        if stack:
            parent = stack[-1]
            selfs[parent] -= min(e, ends[parent]) - s  # type: ignore[operator]  # (a parent is never None)
        stack.append(i)
    return [None if x is None else max(0, x) for x in selfs]


def operator_table(df: pd.DataFrame, mem: pd.DataFrame | None = None, top: int = 25) -> dict[str, Any]:
    """`operators`: the top CPU operators by self time; `kernels`: the top device kernels by time; each with calls,
    total and self (or device) seconds, its share, and whether it is communication; `totals`: the seconds of each
    kind, split into communication and compute."""

    out: dict[str, Any] = {"operators": [], "kernels": [], "totals": {}}
    if df.empty:
        return out
    ops = df[df["category"] == "op"].sort_values(["lane", "start_ns", "end_ns"], ascending=[True, True, False])
    rows: dict[str, list[float]] = {}  # name -> [calls, total ns, self ns, comm]
    instances: dict[str, list[tuple[str, int, int]]] = {}
    for lane, g in ops.groupby("lane", observed=True, sort=False):
        names = g["name"].astype(str).tolist()
        starts, ends = g["start_ns"].astype("int64").tolist(), g["end_ns"].astype("int64").tolist()
        for name, s, e, self_ns in zip(names, starts, ends, _self_times(starts, ends, names)):
            if self_ns is None:
                continue  # (the same call entered again: counted once, with its parent)
            r = rows.setdefault(name, [0, 0, 0, is_comm(name, "op")])
            r[0] += 1
            r[1] += e - s
            r[2] += self_ns
            calls = instances.setdefault(name, [])
            if len(calls) < 1000:
                calls.append((str(lane), s, e))
    total_self = sum(r[2] for r in rows.values()) or 1
    ranked = sorted(rows.items(), key=lambda kv: -kv[1][2])[:top]
    peaks = _peak_memory(mem, {name: instances.get(name, []) for name, _ in ranked}) if mem is not None else {}
    out["operators"] = [{"name": name[:300], "calls": int(r[0]), "total_s": r[1] / NS, "self_s": r[2] / NS,
                         "self_pct": 100.0 * r[2] / total_self, "comm": bool(r[3]),
                         "peak_allocated_bytes": peaks.get(name)} for name, r in ranked]
    kern = df[df["category"].isin(["kernel", "communication"]) & df["name"].notna()]
    kern = kern[kern["category"] == "kernel"] if (kern["category"] == "kernel").any() else kern
    if not kern.empty:
        dur = (kern["end_ns"].astype("int64") - kern["start_ns"].astype("int64")).to_numpy()
        frame = kern.assign(_d=dur, _n=kern["name"].astype(str))
        agg = frame.groupby("_n", observed=True)["_d"].agg(["count", "sum", "max"])
        agg = agg.sort_values("sum", ascending=False)
        total_k = float(agg["sum"].sum()) or 1.0
        out["kernels"] = [{"name": str(name)[:300], "calls": int(row["count"]), "total_s": float(row["sum"]) / NS,
                           "mean_us": float(row["sum"]) / max(1, int(row["count"])) / 1e3,
                           "max_us": float(row["max"]) / 1e3, "share_pct": 100.0 * float(row["sum"]) / total_k,
                           "comm": is_comm(str(name), "kernel")} for name, row in agg.head(top).iterrows()]
        comm_k = float(agg[[is_comm(str(n), "kernel") for n in agg.index]]["sum"].sum()) if len(agg) else 0.0
        out["totals"]["kernels"] = {"total_s": total_k / NS, "comm_s": comm_k / NS,
                                    "compute_s": (total_k - comm_k) / NS}
    comm_ops = sum(r[2] for r in rows.values() if r[3])
    if rows:
        out["totals"]["operators"] = {"self_s": total_self / NS, "comm_s": comm_ops / NS,
                                      "compute_s": (total_self - comm_ops) / NS}
    return out


def _peak_memory(mem: pd.DataFrame, calls: dict[str, list[tuple[str, int, int]]]) -> dict[str, float]:
    """Per operator name, the most bytes allocated on its lane while one of its calls ran."""
    import numpy as np

    if mem.empty or "allocated_bytes" not in mem.columns:
        return {}
    by_lane = {}
    for lane, g in mem.sort_values("ts_ns").groupby("lane", observed=True):
        by_lane[str(lane)] = (g["ts_ns"].astype("int64").to_numpy(),
                              g["allocated_bytes"].astype("float64").to_numpy())
    out: dict[str, float] = {}
    budget = MAX_MEMORY_INSTANCES
    for name, instances in calls.items():
        best = None
        for lane, s, e in instances[:budget]:
            series = by_lane.get(lane)
            if series is None:
                continue
            ts, alloc = series
            lo, hi = np.searchsorted(ts, s, "left"), np.searchsorted(ts, e, "right")
            level = alloc[lo - 1] if lo > 0 else None  # carried into the call
            inside = alloc[lo:hi]
            peak = max([x for x in (level, inside.max() if len(inside) else None) if x is not None], default=None)
            if peak is not None and (best is None or peak > best):
                best = float(peak)
        budget -= min(len(instances), budget)
        if best is not None:
            out[name] = best
    return out

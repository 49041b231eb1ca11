"""Analyzers: pure functions from the event table to result tables. Definitions follow
docs/insights.md (the online insight metrics reuse the same functions in `rl_insight.semantics.insights`),
so offline and online numbers agree."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
import pandas as pd

from ..semantics import insights as ins
from .ledger import trace_ledger
from .operators import operator_table

NS = 1e9


def stages(df: pd.DataFrame) -> pd.DataFrame:
    """Outermost annotated ranges (verl's stages): depth 0 within the annotation family."""
    return df[(df["category"] == "annotation") & (df["depth"] == 0)]


def as_spans(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{"name": n, "lane": str(lane), "kind": "state", "start_ns": int(s), "end_ns": int(e)}
            for n, lane, s, e in zip(df["name"], df["lane"], df["start_ns"], df["end_ns"])]


def stage_stats(df: pd.DataFrame) -> pd.DataFrame:
    """Duration statistics per (role, rank, stage), seconds."""
    st = stages(df)
    if st.empty:
        return pd.DataFrame(columns=["role", "rank", "name", "count", "total_s", "mean_s", "p50_s", "p95_s", "max_s"])
    d = st.assign(dur=(st["end_ns"] - st["start_ns"]) / NS)
    g = d.groupby(["role", "rank", "name"], observed=True, dropna=False)["dur"]
    out = pd.DataFrame({"count": g.size(), "total_s": g.sum(), "mean_s": g.mean(), "p50_s": g.median(),
                        "p95_s": g.quantile(0.95), "max_s": g.max()}).reset_index()
    return out.sort_values(["role", "rank", "name"]).reset_index(drop=True)


def step_windows(df: pd.DataFrame) -> list[tuple[int, int, int]]:
    """(step, start, end) from the events' `step` column; one window for the whole trace without steps."""
    known = df.dropna(subset=["step"])
    if not known.empty:
        g = known.groupby("step")
        return [(int(s), int(a), int(b)) for s, a, b in zip(g.size().index, g["start_ns"].min(), g["end_ns"].max())]
    if df.empty:
        return []
    return [(0, int(df["start_ns"].min()), int(df["end_ns"].max()))]


def _stage_groups_by_step(df: pd.DataFrame) -> list[tuple[int, pd.DataFrame]]:
    """The stages of each step, keyed by the step the events carry (from the file name), never by time or
    order: in async schedules one step's rollout overlaps the next step's training in time. Without
    steps, the whole trace is step 0."""
    st = stages(df)
    if st.empty:
        return []
    if st["step"].notna().any():
        return [(int(step), g) for step, g in st.dropna(subset=["step"]).groupby("step")]
    return [(0, st)]


def step_breakdown(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Per step: wall time each stage name was active on any lane, from that step's events only."""
    out = []
    for step, g in _stage_groups_by_step(df):
        a, b = int(g["start_ns"].min()), int(g["end_ns"].max())
        out += ins.step_breakdown(as_spans(g), [(step, a, b)], now_ns=0)
    return out


def utilization(df: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Busy / idle (bubble) time per lane over the whole analysed window."""
    if df.empty:
        return {}
    t0, t1 = int(df["start_ns"].min()), int(df["end_ns"].max())
    return ins.lane_utilization(as_spans(stages(df)), t0, t1, now_ns=t1)


def overlap(df: pd.DataFrame) -> dict[str, float]:
    if df.empty:
        return {"generation_s": 0.0, "training_s": 0.0, "overlap_s": 0.0, "overlap_ratio": 0.0}
    t0, t1 = int(df["start_ns"].min()), int(df["end_ns"].max())
    return ins.overlap(as_spans(stages(df)), t0, t1, now_ns=t1)


def long_tail(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Per step and rollout replica: the replica's generation time in that step (its own events), and
    the slowest replica against the median."""
    out = []
    for step, g in _stage_groups_by_step(df):
        busy = {lane: ins.length(iv.iv) / NS for lane, iv in ins.generation_lanes(as_spans(g), now_ns=0).items()}
        tail = ins.tail_of_step(step, busy)
        if tail is not None:
            out.append(tail)
    return out


def staleness_time(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Staleness as time, per step: from the end of the step's rollout (its last generation stage) to the
    start of the training that consumes it (its first training stage). About zero in a synchronous
    schedule; in an asynchronous one, how long generated samples waited."""
    out = []
    for step, g in _stage_groups_by_step(df):
        phases = [ins.phase(str(n), str(lane)) for n, lane in zip(g["name"], g["lane"])]
        gen = g[[p == "generation" for p in phases]]
        train = g[[p == "training" for p in phases]]
        if gen.empty or train.empty:
            continue
        end, start = int(gen["end_ns"].max()), int(train["start_ns"].min())
        out.append({"step": step, "rollout_end_ns": end, "training_start_ns": start, "wait_s": (start - end) / NS})
    return out


def skew(df: pd.DataFrame, threshold: float = 1.5) -> pd.DataFrame:
    """Per (role, stage[, step]): each rank's total time; the slowest rank, how much slower than the median,
    and whether it is a straggler (more than `threshold` × the median)."""
    st = stages(df).dropna(subset=["rank"])
    cols = [
        "role",
        "name",
        "step",
        "ranks",
        "slowest_rank",
        "slowest_s",
        "median_s",
        "fastest_s",
        "spread_s",
        "ratio",
        "straggler",
    ]
    if st.empty:
        return pd.DataFrame(columns=cols)
    d = st.assign(dur=(st["end_ns"] - st["start_ns"]) / NS, step=st["step"].fillna(-1))
    per_rank = d.groupby(["role", "name", "step", "rank"], observed=True)["dur"].sum().reset_index()
    rows = []
    for (role, name, step), g in per_rank.groupby(["role", "name", "step"], observed=True):
        if len(g) < 2:
            continue
        durs = dict(zip(g["rank"].astype(int), g["dur"]))
        slowest = max(durs, key=lambda r: (durs[r], r))
        med = statistics.median(durs.values())
        ratio = durs[slowest] / med if med else float("inf")
        rows.append([role, name, None if step == -1 else int(step), len(durs), slowest, durs[slowest], med,
                     min(durs.values()), durs[slowest] - min(durs.values()), ratio, ratio > threshold])
    return pd.DataFrame(rows, columns=cols).sort_values("ratio", ascending=False).reset_index(drop=True)


def _iv(frame: pd.DataFrame) -> list[tuple[int, int]]:
    """The union of a frame's [start_ns, end_ns) intervals."""
    return ins.union(zip(frame["start_ns"].tolist(), frame["end_ns"].tolist()))


def communication(df: pd.DataFrame) -> pd.DataFrame:
    """Per lane and stage: communication time, computation time, and communication not hidden behind
    computation. Torch: communication ranges/kernels vs compute kernels/ops (needs --detail ops or kernels
    for the compute side). Ascend: the Overlap Analysis lanes."""
    cols = ["lane", "stage", "instances", "stage_s", "comm_s", "compute_s", "comm_not_overlapped_s", "compute_recorded"]
    st = stages(df)
    if st.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for lane, lane_df in df.groupby("lane", observed=True):
        comm = lane_df[lane_df["category"] == "communication"]
        compute = lane_df[lane_df["category"].isin(["op", "kernel"])]
        ov = lane_df[lane_df["category"] == "overlap"]
        comm_iv, compute_iv = _iv(comm), _iv(compute)
        ov_not = _iv(ov[ov["name"] == "Communication(Not Overlapped)"])
        ov_comm = _iv(ov[ov["name"].isin(["Communication", "Communication(Not Overlapped)"])])
        ov_compute = _iv(ov[ov["name"] == "Computing"])
        for name, g in stages(lane_df).groupby("name", observed=True):
            totals = np.zeros(4)
            for a, b in zip(g["start_ns"].tolist(), g["end_ns"].tolist()):
                if ov_comm or ov_compute:
                    c = ins.clip(ov_comm, a, b)
                    k = ins.clip(ov_compute, a, b)
                    nov = ins.length(ins.clip(ov_not, a, b))
                else:
                    c = ins.clip(comm_iv, a, b)
                    k = ins.clip(compute_iv, a, b)
                    nov = ins.length(c) - ins.length(ins.intersect(c, k))
                totals += [b - a, ins.length(c), ins.length(k), nov]
            rows.append([str(lane), name, len(g), *(totals / NS), bool(len(compute) or len(ov))])
    return pd.DataFrame(rows, columns=cols).sort_values(["lane", "stage"]).reset_index(drop=True)


def memory(df: pd.DataFrame, mem: pd.DataFrame | None) -> dict[str, list[dict[str, Any]]]:
    """Per lane and device: the peak of allocated and reserved bytes; per lane, device and stage: the peak
    allocated while that stage ran (the level carried into the stage counts too)."""
    if mem is None or mem.empty:
        return {"lanes": [], "stages": []}
    lanes, per_stage = [], []
    st = stages(df) if not df.empty else df
    for (lane, device), g in mem.groupby(["lane", "device"], sort=True):
        ts = g["ts_ns"].to_numpy()
        alloc = g["allocated_bytes"].to_numpy(dtype="float64")
        reserved = g["reserved_bytes"].to_numpy(dtype="float64")
        i = int(np.nanargmax(alloc))
        lanes.append(
            {
                "lane": str(lane),
                "device": device,
                "samples": int(len(g)),
                "peak_allocated_bytes": float(alloc[i]),
                "peak_at_ns": int(ts[i]),
                "peak_reserved_bytes": float(np.nanmax(reserved)) if np.isfinite(reserved).any() else None,
                "last_allocated_bytes": float(alloc[-1]),
            }
        )
        if st.empty:
            continue
        mine = st[st["lane"].astype(str) == str(lane)]
        peaks: dict[str, float] = {}
        for name, a, b in zip(mine["name"], mine["start_ns"].tolist(), mine["end_ns"].tolist()):
            lo = max(0, int(np.searchsorted(ts, a, side="right")) - 1)  # the level when the stage began
            hi = int(np.searchsorted(ts, b, side="right"))
            if hi > lo:
                peaks[name] = max(peaks.get(name, 0.0), float(np.nanmax(alloc[lo:hi])))
        per_stage += [
            {"lane": str(lane), "device": device, "stage": k, "peak_allocated_bytes": v}
            for k, v in sorted(peaks.items())
        ]
    return {"lanes": lanes, "stages": per_stage}


def summarize(df: pd.DataFrame, metrics: pd.DataFrame | None = None, mem: pd.DataFrame | None = None) -> dict[str, Any]:
    """Every analyzer's result as plain data (JSON-able)."""
    out: dict[str, Any] = {
        "events": int(len(df)),
        "lanes": sorted({str(x) for x in df["lane"].unique()}) if not df.empty else [],
        "window": {"start_ns": int(df["start_ns"].min()), "end_ns": int(df["end_ns"].max()),
                   "seconds": (int(df["end_ns"].max()) - int(df["start_ns"].min())) / NS} if not df.empty else None,
        "stage_stats": stage_stats(df).to_dict(orient="records"),
        "steps": step_breakdown(df),
        "utilization": utilization(df),
        "overlap": overlap(df),
        "skew": skew(df).to_dict(orient="records"),
        "long_tail": long_tail(df),
        "staleness_time": staleness_time(df),
        "communication": communication(df).to_dict(orient="records"),
        "memory": memory(df, mem),
        "operators": operator_table(df, mem),
        "ledger": trace_ledger(df, metrics),
    }
    if metrics is not None and not metrics.empty:
        timing = [c for c in metrics.columns if c.startswith("timing_s/")]
        out["log"] = {
            "steps": int(len(metrics)),
            "first_step": int(metrics.index.min()),
            "last_step": int(metrics.index.max()),
            "timing_mean_s": {c: float(metrics[c].mean()) for c in timing},
        }
    return out

"""The tables of the HTML report, each row linked to its place on the timeline.

Built from `analyze.summarize`'s result and the event table: every row carries the lane to
highlight and the time range (ms from the report's t0) to zoom to, and a flag for rows that need a
look (a straggler, exposed communication, a long tail).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from .. import analyze as an
from .explain_tables import explain_tables
from .operator_tables import operator_tables

NS_PER_MS = 1e6
EXPOSED_COMM_SHARE = 0.10  # communication not hidden behind computation above this share of the stage is flagged


def _ranges(df: pd.DataFrame) -> dict[tuple[str, str], tuple[int, int]]:
    """(lane, stage) -> (first start, last end) of that stage on that lane."""
    st = an.stages(df)
    if st.empty:
        return {}
    g = st.groupby([st["lane"].astype(str), st["name"].astype(str)], observed=True)
    return {k: (int(a), int(b)) for k, a, b in zip(g.size().index, g["start_ns"].min(), g["end_ns"].max())}


def tables(df: pd.DataFrame, result: dict[str, Any], t0: int) -> list[dict[str, Any]]:
    ms = lambda ns: round((ns - t0) / NS_PER_MS, 4)  # noqa: E731 - one-line constructors, a table read where it is used
    whole = (ms(int(df["start_ns"].min())), ms(int(df["end_ns"].max()))) if not df.empty else (0.0, 0.0)
    ranges = _ranges(df)
    steps = {s["step"]: (ms(s["start_ns"]), ms(s["end_ns"])) for s in result.get("steps", [])}
    lane_of_rank = {}
    if not df.empty:
        for role, rank, lane in df[["role", "rank", "lane"]].drop_duplicates().itertuples(index=False):
            if not pd.isna(rank):
                lane_of_rank[(str(role), int(rank))] = str(lane)
    r3 = lambda v: None if v is None else round(float(v), 4)  # noqa: E731 - one-line constructors, a table read where it is used
    out: list[dict[str, Any]] = []

    rows = []
    for r in result.get("stage_stats", []):
        rank = None if pd.isna(r["rank"]) else int(r["rank"])
        lane = lane_of_rank.get((str(r["role"]), rank)) if rank is not None else None
        a, b = ranges.get((lane, str(r["name"])), (None, None)) if lane else (None, None)
        rows.append(
            {
                "cells": [
                    r["role"],
                    rank,
                    r["name"],
                    r["count"],
                    r3(r["total_s"]),
                    r3(r["mean_s"]),
                    r3(r["p50_s"]),
                    r3(r["p95_s"]),
                    r3(r["max_s"]),
                ],
                "lane": lane,
                "from": ms(a) if a else whole[0],
                "to": ms(b) if b else whole[1],
            }
        )
    out.append({"id": "stages", "title": "Stage statistics (seconds)",
                "columns": ["role", "rank", "stage", "count", "total", "mean", "p50", "p95", "max"], "rows": rows})

    names = sorted({k for s in result.get("steps", []) for k in s["states"]})
    out.append(
        {
            "id": "steps",
            "title": "Per-step breakdown (seconds each stage was active on any lane)",
            "columns": ["step", "duration", *names],
            "rows": [
                {
                    "cells": [s["step"], r3(s["duration_s"]), *[r3(s["states"].get(n)) for n in names]],
                    "lane": None,
                    "from": steps[s["step"]][0],
                    "to": steps[s["step"]][1],
                }
                for s in result.get("steps", [])
            ],
        }
    )

    out.append({"id": "bubbles", "title": "Bubbles: idle time per lane",
                "columns": ["lane", "busy (s)", "utilization", "bubble ratio"],
                "rows": [{"cells": [lane, r3(v["busy_s"]), r3(v["utilization"]), r3(v["bubble_ratio"])], "lane": lane,
                          "from": whole[0], "to": whole[1], "flag": v["bubble_ratio"] > 0.5}
                         for lane, v in sorted(result.get("utilization", {}).items())]})

    o = result.get("overlap") or {}
    out.append(
        {
            "id": "overlap",
            "title": "Rollout / training overlap",
            "columns": ["generation (s)", "training (s)", "both (s)", "overlap ratio"],
            "rows": [
                {
                    "cells": [
                        r3(o.get("generation_s")),
                        r3(o.get("training_s")),
                        r3(o.get("overlap_s")),
                        r3(o.get("overlap_ratio")),
                    ],
                    "lane": None,
                    "from": whole[0],
                    "to": whole[1],
                }
            ]
            if o
            else [],
        }
    )

    rows = []
    for r in result.get("skew", []):
        lane = lane_of_rank.get((str(r["role"]), int(r["slowest_rank"])))
        a, b = steps.get(r["step"], whole) if r["step"] is not None else whole
        if lane and (lane, str(r["name"])) in ranges and r["step"] is None:
            a, b = (ms(x) for x in ranges[(lane, str(r["name"]))])
        rows.append(
            {
                "cells": [
                    r["role"],
                    r["name"],
                    r["step"],
                    r["ranks"],
                    r["slowest_rank"],
                    r3(r["slowest_s"]),
                    r3(r["median_s"]),
                    r3(r["ratio"]),
                    "yes" if r["straggler"] else "",
                ],
                "lane": lane,
                "from": a,
                "to": b,
                "flag": bool(r["straggler"]),
            }
        )
    out.append(
        {
            "id": "skew",
            "title": "Cross-rank skew and stragglers",
            "columns": [
                "role",
                "stage",
                "step",
                "ranks",
                "slowest rank",
                "slowest (s)",
                "median (s)",
                "ratio",
                "straggler",
            ],
            "rows": rows,
        }
    )

    out.append(
        {
            "id": "long-tail",
            "title": "Rollout long tail (per step)",
            "columns": ["step", "slowest lane", "slowest (s)", "median (s)", "ratio"],
            "rows": [
                {
                    "cells": [t["step"], t["slowest_lane"], r3(t["slowest_s"]), r3(t["median_s"]), r3(t["ratio"])],
                    "lane": t["slowest_lane"],
                    "from": steps.get(t["step"], whole)[0],
                    "to": steps.get(t["step"], whole)[1],
                    "flag": t["ratio"] > 1.5,
                }
                for t in result.get("long_tail", [])
            ],
        }
    )

    out.append(
        {
            "id": "staleness",
            "title": "Staleness as time: rollout end to the training that consumes it (per step)",
            "columns": ["step", "rollout ends", "training starts", "wait (s)"],
            "rows": [
                {
                    "cells": [
                        s["step"],
                        round(ms(s["rollout_end_ns"]), 3),
                        round(ms(s["training_start_ns"]), 3),
                        r3(s["wait_s"]),
                    ],
                    "lane": None,
                    "from": min(ms(s["rollout_end_ns"]), ms(s["training_start_ns"])),
                    "to": max(ms(s["rollout_end_ns"]), ms(s["training_start_ns"])) + 1,
                }
                for s in result.get("staleness_time", [])
            ],
        }
    )

    rows = []
    for r in result.get("communication", []):
        a, b = ranges.get((r["lane"], r["stage"]), (None, None))
        exposed = r["comm_not_overlapped_s"] / r["stage_s"] if r["stage_s"] else 0.0
        rows.append({"cells": [r["lane"], r["stage"], r["instances"], r3(r["stage_s"]), r3(r["comm_s"]),
                               r3(r["compute_s"]) if r["compute_recorded"] else "n/a", r3(r["comm_not_overlapped_s"]),
                               r3(exposed)],
                     "lane": r["lane"], "from": ms(a) if a else whole[0], "to": ms(b) if b else whole[1],
                     "flag": exposed > EXPOSED_COMM_SHARE})
    out.append(
        {
            "id": "communication",
            "title": "Communication vs computation (flagged: exposed communication > 10 % of the stage)",
            "columns": [
                "lane",
                "stage",
                "instances",
                "stage (s)",
                "communication (s)",
                "computation (s)",
                "exposed (s)",
                "exposed share",
            ],
            "rows": rows,
        }
    )

    mem = result.get("memory") or {}
    gib = lambda v: None if v is None else round(v / 2**30, 3)  # noqa: E731 - one-line constructors, a table read where it is used
    rows = [
        {
            "cells": [
                r["lane"],
                r["device"],
                "(whole trace)",
                gib(r["peak_allocated_bytes"]),
                gib(r["peak_reserved_bytes"]),
            ],
            "lane": r["lane"],
            "from": ms(r["peak_at_ns"]) - 1,
            "to": ms(r["peak_at_ns"]) + 1,
        }
        for r in mem.get("lanes", [])
    ]
    for r in mem.get("stages", []):
        a, b = ranges.get((r["lane"], r["stage"]), (None, None))
        rows.append(
            {
                "cells": [r["lane"], r["device"], r["stage"], gib(r["peak_allocated_bytes"]), None],
                "lane": r["lane"],
                "from": ms(a) if a else whole[0],
                "to": ms(b) if b else whole[1],
            }
        )
    out.append(
        {
            "id": "memory",
            "title": "Memory (GiB): peak per lane and per stage",
            "columns": ["lane", "device", "stage", "peak allocated", "peak reserved"],
            "rows": rows,
        }
    )
    out += operator_tables(df, result, ms, whole)
    out += explain_tables(result, ms)
    return out

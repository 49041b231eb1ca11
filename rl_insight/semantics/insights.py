"""RL insight metrics computed from state spans: pure functions, span lists in, plain dicts out.

Definitions (docs/insights.md states them for users; the offline analysis uses the same ones):

* A *state* is a top-level span on a lane (`kind == "state"`); nested children are not counted
  again. Open states (no end) count until `now`.
* *Busy time* of a lane: the length of the union of its state intervals inside the window.
  *Utilization* = busy / window length; *bubble ratio* = 1 − utilization.
* *Phase* of a state: `generation` (names ending in `_generate`, or `generate`, `generate_sequences`,
  `rollout`, `async_rollout`), `weight_sync` (`update_weights`, `sync_weights`, `weight_sync`),
  otherwise `training` when the lane is a trainer lane (`rank_*` online, `<role>/rank<r>` offline),
  else `other`.
* *Step windows* come from the step metric: step *s* runs from the time step *s−1* was logged to
  the time step *s* was logged (verl logs metrics at the end of a step).
* *Step breakdown*: per step and state name, the wall time during which at least one lane was in
  that state (union across lanes).
* *Rollout–training overlap ratio*: |G ∩ T| / |G ∪ T| where G is the union of generation intervals
  and T of training intervals in the window. 0 for a synchronous schedule, approaching 1 when
  generation is fully hidden behind training (what separate-async mode buys).
* *Rollout long tail* per step: each rollout lane's generation busy time in the step; the ratio of
  the slowest to the median lane, and which lane is the slowest.
* *Stalled lane*: an open state that has lasted longer than max(`factor` × p95 of the finished
  durations of that state name, `min_seconds`); with fewer than 3 finished examples the threshold
  is `no_history_seconds`.
* *Rollout wait* (staleness as time) per step: from the end of the last generation state that ended
  before the step's first training state began, to that start: how long the freshest finished
  samples waited for the trainer. About zero in a synchronous schedule.
* *Staleness*: for generation states carrying a `param_version` attribute, the trainer's
  parameter version (the latest value of a version metric at the state's end) minus that
  attribute; reported as mean and max.
"""

from __future__ import annotations

import math
import statistics
from bisect import bisect_right
from typing import Any, Iterable, Sequence

GENERATION_NAMES = {"generate", "generate_sequences", "rollout", "async_rollout"}
WEIGHT_SYNC_NAMES = {"update_weights", "sync_weights", "weight_sync"}
NS = 1e9

Interval = tuple[int, int]


def phase(name: str, lane: str) -> str:
    if name.endswith("_generate") or name in GENERATION_NAMES:
        return "generation"
    if name in WEIGHT_SYNC_NAMES:
        return "weight_sync"
    lane = lane or ""
    if lane.startswith("rank") or "/rank" in lane:  # online `rank_3`, offline `actor/rank3`
        return "training"
    return "other"


def _end(span: dict[str, Any], now_ns: int) -> int:
    return span["end_ns"] if span.get("end_ns") is not None else now_ns


def states(spans: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in spans if s.get("kind", "state") == "state"]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    merged: list[list[int]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def length(intervals: Iterable[Interval]) -> int:
    return sum(b - a for a, b in intervals)


def clip(intervals: Iterable[Interval], t0: int, t1: int) -> list[Interval]:
    return [(max(a, t0), min(b, t1)) for a, b in intervals if b > t0 and a < t1]


class Disjoint:
    """A sorted, disjoint interval list (a `union`) with O(log n) clipping: per-step windows over a long
    run cost a bisect each instead of a pass over every interval of the run."""

    __slots__ = ("iv", "_ends")

    def __init__(self, intervals: list[Interval]) -> None:
        self.iv = intervals
        self._ends = [b for _, b in intervals]

    def length_in(self, t0: int, t1: int) -> int:
        i = bisect_right(self._ends, t0)  # first interval ending after t0
        total = 0
        iv = self.iv
        while i < len(iv) and iv[i][0] < t1:
            a, b = iv[i]
            total += min(b, t1) - max(a, t0)
            i += 1
        return total


def intersect(x: list[Interval], y: list[Interval]) -> list[Interval]:
    """Intersection of two sorted, disjoint interval lists."""
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


# ----------------------------------------------------------------------------- metrics
def lane_busy(spans: Iterable[dict[str, Any]], t0: int, t1: int, now_ns: int) -> dict[str, dict[str, float]]:
    """{lane: {state name: busy seconds in [t0, t1)}}."""
    per: dict[tuple[str, str], list[Interval]] = {}
    for s in states(spans):
        per.setdefault((s["lane"], s["name"]), []).append((s["start_ns"], _end(s, now_ns)))
    out: dict[str, dict[str, float]] = {}
    for (lane, name), iv in per.items():
        out.setdefault(lane, {})[name] = length(clip(union(iv), t0, t1)) / NS
    return out


def lane_utilization(spans: Iterable[dict[str, Any]], t0: int, t1: int, now_ns: int) -> dict[str, dict[str, float]]:
    """{lane: {"busy_s", "utilization", "bubble_ratio"}} over [t0, t1)."""
    per: dict[str, list[Interval]] = {}
    for s in states(spans):
        per.setdefault(s["lane"], []).append((s["start_ns"], _end(s, now_ns)))
    window = max(1, t1 - t0)
    out = {}
    for lane, iv in per.items():
        busy = length(clip(union(iv), t0, t1))
        out[lane] = {"busy_s": busy / NS, "utilization": busy / window, "bubble_ratio": 1 - busy / window}
    return out


def phase_intervals(spans: Iterable[dict[str, Any]], which: str, now_ns: int) -> list[Interval]:
    return union((s["start_ns"], _end(s, now_ns)) for s in states(spans) if phase(s["name"], s["lane"]) == which)


def overlap(spans: Sequence[dict[str, Any]], t0: int, t1: int, now_ns: int) -> dict[str, float]:
    g = clip(phase_intervals(spans, "generation", now_ns), t0, t1)
    t = clip(phase_intervals(spans, "training", now_ns), t0, t1)
    both = length(intersect(g, t))
    either = length(union(g + t))
    return {"generation_s": length(g) / NS, "training_s": length(t) / NS, "overlap_s": both / NS,
            "overlap_ratio": both / either if either else 0.0}


def step_windows(step_samples: Sequence[tuple[float, float]]) -> list[tuple[int, int, int]]:
    """[(step, start_ns, end_ns)] from (unix ts, step value) samples of the step metric, in time order."""
    firsts: dict[int, float] = {}
    for ts, step in sorted(step_samples):
        if not (math.isfinite(step) and math.isfinite(ts)):  # a stored inf/NaN must not stop every insight
            continue
        firsts.setdefault(int(step), ts)
    ordered = sorted(firsts.items(), key=lambda kv: kv[1])
    out = []
    for (_, prev_ts), (step, ts) in zip(ordered, ordered[1:]):
        out.append((step, int(prev_ts * NS), int(ts * NS)))
    return out


def step_breakdown(
    spans: Sequence[dict[str, Any]], windows: Sequence[tuple[int, int, int]], now_ns: int
) -> list[dict[str, Any]]:
    per_name: dict[str, list[Interval]] = {}
    for s in states(spans):
        per_name.setdefault(s["name"], []).append((s["start_ns"], _end(s, now_ns)))
    merged = {name: Disjoint(union(iv)) for name, iv in per_name.items()}
    out = []
    for step, a, b in windows:
        seconds = {name: iv.length_in(a, b) / NS for name, iv in merged.items()}
        out.append({"step": step, "start_ns": a, "end_ns": b, "duration_s": (b - a) / NS,
                    "states": {k: v for k, v in sorted(seconds.items()) if v > 0}})
    return out


def generation_lanes(spans: Iterable[dict[str, Any]], now_ns: int) -> dict[str, "Disjoint"]:
    """Each rollout lane's generation intervals (union), for the long tail."""
    per_lane: dict[str, list[Interval]] = {}
    for s in states(spans):
        if phase(s["name"], s["lane"]) == "generation":
            per_lane.setdefault(s["lane"], []).append((s["start_ns"], _end(s, now_ns)))
    return {lane: Disjoint(union(iv)) for lane, iv in per_lane.items()}


def tail_of_step(step: int, busy: dict[str, float]) -> dict[str, Any] | None:
    """One step's long tail from each rollout lane's generation seconds (None with fewer than 2 lanes)."""
    busy = {k: v for k, v in busy.items() if v > 0}
    if len(busy) < 2:
        return None
    slowest = max(busy, key=lambda k: (busy[k], k))
    median = statistics.median(busy.values())
    return {"step": step, "slowest_lane": slowest, "slowest_s": busy[slowest], "median_s": median,
            "ratio": busy[slowest] / median if median else float("inf"), "lanes": dict(sorted(busy.items()))}


def long_tail(
    spans: Sequence[dict[str, Any]], windows: Sequence[tuple[int, int, int]], now_ns: int
) -> list[dict[str, Any]]:
    merged = generation_lanes(spans, now_ns)
    out = []
    for step, a, b in windows:
        t = tail_of_step(step, {lane: iv.length_in(a, b) / NS for lane, iv in merged.items()})
        if t is not None:
            out.append(t)
    return out


def stalled(spans: Sequence[dict[str, Any]], now_ns: int, factor: float = 3.0, min_seconds: float = 60.0,
            no_history_seconds: float = 1800.0, history: dict[str, list[float]] | None = None) -> list[dict[str, Any]]:
    """`history`: finished durations per state name (seconds) known from elsewhere (the server's per-step
    statistics), added to those of the finished spans given."""
    durations: dict[str, list[float]] = {k: list(v) for k, v in (history or {}).items()}
    for s in states(spans):
        if s.get("end_ns") is not None:
            durations.setdefault(s["name"], []).append((s["end_ns"] - s["start_ns"]) / NS)
    out = []
    for s in states(spans):
        if s.get("end_ns") is not None:
            continue
        open_s = (now_ns - s["start_ns"]) / NS
        hist = sorted(durations.get(s["name"], []))
        if len(hist) >= 3:
            p95 = hist[min(len(hist) - 1, int(round(0.95 * (len(hist) - 1))))]
            threshold = max(factor * p95, min_seconds)
        else:
            p95, threshold = None, no_history_seconds
        if open_s > threshold:
            out.append(
                {
                    "lane": s["lane"],
                    "state": s["name"],
                    "open_s": open_s,
                    "threshold_s": threshold,
                    "usual_p95_s": p95,
                    "span_id": s.get("id"),
                }
            )
    return sorted(out, key=lambda d: -d["open_s"])


def unjudged(spans: Sequence[dict[str, Any]], history: dict[str, list[float]] | None = None) -> list[str]:
    """The lanes holding an open state whose usual length is not known yet: the state finished fewer than 3 times on
    that lane (in `spans`), and fewer than 3 summarized steps hold it (`history`: one duration a step). Counted by
    lane and step, never across lanes: four ranks that each finished one step know one step, not four durations (a
    job that hangs in its second step is judged on its stacks, not called "within its usual time")."""
    steps = {k: len(v) for k, v in (history or {}).items()}
    done: dict[tuple[str, str], int] = {}
    for s in states(spans):
        if s.get("end_ns") is not None:
            done[(s["lane"], s["name"])] = done.get((s["lane"], s["name"]), 0) + 1
    return sorted({s["lane"] for s in states(spans) if s.get("end_ns") is None
                   and done.get((s["lane"], s["name"]), 0) < 3 and steps.get(s["name"], 0) < 3})


def staleness(
    spans: Sequence[dict[str, Any]], versions: Sequence[tuple[float, float]], now_ns: int
) -> dict[str, Any] | None:
    """`versions`: (unix ts, trainer parameter version) samples. None when the job reports no versions."""
    values = staleness_values(spans, versions, now_ns)
    if not values:
        return None
    return {"mean": sum(values) / len(values), "max": max(values), "samples": len(values)}


def staleness_values(
    spans: Sequence[dict[str, Any]], versions: Sequence[tuple[float, float]], now_ns: int
) -> list[float]:
    """One staleness value per generation state that carries `param_version`."""
    if not versions:
        return []
    vs = sorted(versions)
    times = [int(ts * NS) for ts, _ in vs]
    values: list[float] = []
    for s in states(spans):
        pv = (s.get("attributes") or {}).get("param_version")
        if pv is None or phase(s["name"], s["lane"]) != "generation":
            continue
        i = bisect_right(times, _end(s, now_ns)) - 1
        if i >= 0:
            try:
                v = float(vs[i][1]) - float(pv)
            except (TypeError, ValueError, OverflowError):
                continue
            if math.isfinite(v):
                values.append(v)
    return values


def rollout_wait(
    spans: Sequence[dict[str, Any]], windows: Sequence[tuple[int, int, int]], now_ns: int
) -> list[dict[str, Any]]:
    """Per step window: the first training start in it, the last generation end before that, the wait."""
    train_starts = sorted(s["start_ns"] for s in states(spans) if phase(s["name"], s["lane"]) == "training")
    gen_ends = sorted(_end(s, now_ns) for s in states(spans) if s.get("end_ns") is not None
                      and phase(s["name"], s["lane"]) == "generation")
    out = []
    for step, a, b in windows:
        i = bisect_right(train_starts, a - 1)
        if i >= len(train_starts) or train_starts[i] >= b:
            continue
        t = train_starts[i]
        j = bisect_right(gen_ends, t) - 1
        if j < 0:
            continue
        out.append(
            {"step": step, "rollout_end_ns": gen_ends[j], "training_start_ns": t, "wait_s": (t - gen_ends[j]) / NS}
        )
    return out


def summarize(
    spans: Sequence[dict[str, Any]],
    t0: int,
    t1: int,
    now_ns: int,
    step_samples: Sequence[tuple[float, float]] = (),
    version_samples: Sequence[tuple[float, float]] = (),
) -> dict[str, Any]:
    """Every insight for one run over [t0, t1): what the API and /metrics expose."""
    windows = [w for w in step_windows(step_samples) if w[2] > t0 and w[1] < t1]
    stuck = stalled(spans, now_ns)
    return {
        "window": {"from_ns": t0, "to_ns": t1, "seconds": (t1 - t0) / NS},
        "lanes": without_stalls(lane_utilization(spans, t0, t1, now_ns), stuck, t0, t1, now_ns),
        "busy": lane_busy(spans, t0, t1, now_ns),
        "overlap": overlap(spans, t0, t1, now_ns),
        "steps": step_breakdown(spans, windows, now_ns),
        "long_tail": long_tail(spans, windows, now_ns),
        "rollout_wait": rollout_wait(spans, windows, now_ns),
        "stalled": stuck,
        "unjudged": unjudged(spans),
        "staleness": staleness(spans, version_samples, now_ns),
    }


def without_stalls(lanes: dict[str, dict[str, float]], stuck: Sequence[dict[str, Any]], t0: int, t1: int,
                   now_ns: int) -> dict[str, dict[str, float]]:
    """A lane holding a state far past its usual length is not busy for that excess (a hung rank read 88 %
    utilization): the time past the state's usual length (its p95, else the stall threshold) is `stalled_s`, taken
    off `busy_s`."""
    for s in stuck:
        lane = lanes.get(s["lane"])
        if lane is None:
            continue
        usual = s["usual_p95_s"] if s.get("usual_p95_s") is not None else s["threshold_s"]
        began = now_ns - int(s["open_s"] * NS)
        excess = length(clip([(began + int(usual * NS), now_ns)], t0, t1)) / NS
        window = max(1, t1 - t0) / NS
        busy = max(0.0, lane["busy_s"] - excess)
        lane.update(busy_s=busy, utilization=busy / window, bubble_ratio=1 - busy / window,
                    stalled_s=lane.get("stalled_s", 0.0) + excess)
    return lanes

"""The critical path of a step, and what-if estimates on it: pure functions, span lists in, plain dicts out (the
same for the server, from its run store, and for the offline analysis, from its event table).

Definitions (docs/explain.md states them for users):

* The step is the window [a, b) of insights.step_windows; its *elements* are the top-level states
  (`kind == "state"`) on every lane, clipped to the window (an async generation that began in the step before
  counts from a; open states end at now).
* *Critical path*: walking back from b, the element whose end came last at or before the current time is what the
  work after it waited on; the walk continues from that element's start. The time between that end and the current
  time is an idle *gap* on the path (a bubble that cost the step time: nothing on the path was running). The walk
  ends at a (a leading gap when nothing ran right after the step began). By construction the elements and gaps
  tile [a, b): their lengths add up to the step's duration.
* *Slack* of an element: how much later it could have ended without moving the step's end. Lanes are sequential;
  an element's latest allowed end is the latest allowed start of the next element on its own lane (the step's end
  for the last one) and, on the path, the start of the path's next element. Path elements have the gap after them
  as slack (zero when the next one started as they ended); no slack is negative.
* *What-if* savings are estimates on this model (first order: one change at a time, the path held fixed):
  - `tail`: the long-tail replica finishing with the others — the generation phase then ends when the second
    latest rollout lane ended; saved only when the path runs through the latest one;
  - `cut_k`: the slowest k % of the step's generation items (trajectories when known, else generate states) not
    waited for — each rollout lane ends at its last kept item, moved earlier by the cut items before it on a
    sequential lane; saved: how much earlier the generation the path waited on would have ended;
  - `stage` x % faster: x % of that stage's time on the path;
  - `bubbles`: the gaps on the path removed.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from .insights import NS, phase

CUT_PERCENTS = (5, 10, 20)  # the cuts summarized for every step (any k for one step, from its spans)


def _elements(spans: Iterable[dict[str, Any]], a: int, b: int, now_ns: int) -> list[dict[str, Any]]:
    """Top-level states overlapping [a, b), clipped to it, oldest first."""
    out = []
    for s in spans:
        if s.get("kind", "state") != "state":
            continue
        end = s["end_ns"] if s.get("end_ns") is not None else now_ns
        start, stop = max(s["start_ns"], a), min(end, b)
        if stop <= start:
            continue
        out.append({"lane": s.get("lane") or "", "name": s["name"], "start_ns": start, "end_ns": stop,
                    "began_ns": s["start_ns"], "id": s.get("id")})
    out.sort(key=lambda e: (e["start_ns"], e["end_ns"], e["lane"], e["name"]))
    return out


def critical_path(spans: Iterable[dict[str, Any]], a: int, b: int, now_ns: int) -> dict[str, Any]:
    """The step's critical path: elements (oldest first, each with its slack) and the gaps between them; every other
    element's slack; seconds on the path per stage and per lane."""
    elems = _elements(spans, a, b, now_ns)
    by_end = sorted(range(len(elems)), key=lambda i: (elems[i]["end_ns"], elems[i]["start_ns"]))
    ends = [elems[i]["end_ns"] for i in by_end]
    path: list[int] = []
    gaps: list[dict[str, Any]] = []
    cur = b
    used: set[int] = set()
    while cur > a:
        # the latest end at or before `cur` among elements not yet on the path that started before it
        j = _bisect_right(ends, cur) - 1
        while j >= 0 and (by_end[j] in used or elems[by_end[j]]["start_ns"] >= cur):
            j -= 1
        if j < 0:
            gaps.append({"start_ns": a, "end_ns": cur, "seconds": (cur - a) / NS})
            break
        i = by_end[j]
        e = elems[i]
        if e["end_ns"] < cur:
            gaps.append({"start_ns": e["end_ns"], "end_ns": cur, "seconds": (cur - e["end_ns"]) / NS})
        path.append(i)
        used.add(i)
        cur = e["start_ns"]
    path.reverse()
    gaps.reverse()
    slack = _slacks(elems, path, b)
    on_path = [{**_public(elems[i]), "slack_s": slack[i] / NS} for i in path]
    by_stage: dict[str, float] = {}
    by_lane: dict[str, float] = {}
    for e in on_path:
        by_stage[e["name"]] = by_stage.get(e["name"], 0.0) + e["seconds"]
        by_lane[e["lane"]] = by_lane.get(e["lane"], 0.0) + e["seconds"]
    off = [{**_public(elems[i]), "slack_s": slack[i] / NS} for i in range(len(elems)) if i not in used]
    return {"start_ns": a, "end_ns": b, "duration_s": (b - a) / NS, "elements": on_path, "gaps": gaps,
            "bubbles_s": sum(g["seconds"] for g in gaps), "by_stage": by_stage, "by_lane": by_lane, "others": off}


def _bisect_right(xs: Sequence[int], x: int) -> int:
    lo, hi = 0, len(xs)
    while lo < hi:
        mid = (lo + hi) // 2
        if x < xs[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _public(e: dict[str, Any]) -> dict[str, Any]:
    return {"lane": e["lane"], "name": e["name"], "start_ns": e["start_ns"], "end_ns": e["end_ns"],
            "seconds": (e["end_ns"] - e["start_ns"]) / NS}


def _slacks(elems: list[dict[str, Any]], path: list[int], b: int) -> dict[int, int]:
    """Latest allowed end minus actual end, per element (ns). An element's latest allowed end is the earliest of:
    the step's end; the first path element that starts at or after it ends (anything that ended before a path
    element began may have been what it waited on); the latest allowed start of the next element on its own lane
    that starts after it ends (a backward pass over each lane's chain). None of these is before its own end."""
    path_starts = sorted(elems[i]["start_ns"] for i in path)
    latest_end: dict[int, int] = {}
    by_lane: dict[str, list[int]] = {}
    for i, e in enumerate(elems):
        by_lane.setdefault(e["lane"], []).append(i)
    for idx in by_lane.values():
        idx.sort(key=lambda i: (elems[i]["start_ns"], elems[i]["end_ns"]))
        later: list[tuple[int, int]] = []  # (start, latest allowed start) of the lane's later elements
        for i in reversed(idx):
            e = elems[i]
            k = _bisect_left(path_starts, e["end_ns"])
            allowed = min(b, path_starts[k] if k < len(path_starts) else b)
            for start, latest_start in later:
                if start >= e["end_ns"]:  # overlapping ones (concurrent requests on one lane) do not bound it
                    allowed = min(allowed, latest_start)
            latest_end[i] = allowed
            later.append((e["start_ns"], allowed - (e["end_ns"] - e["start_ns"])))
    return {i: latest_end[i] - elems[i]["end_ns"] for i in range(len(elems))}


def _bisect_left(xs: Sequence[int], x: int) -> int:
    lo, hi = 0, len(xs)
    while lo < hi:
        mid = (lo + hi) // 2
        if xs[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def generation_items(spans: Iterable[dict[str, Any]], a: int, b: int, now_ns: int,
                     trajectories: Sequence[dict[str, Any]] | None = None) -> dict[str, list[tuple[int, int]]]:
    """Per rollout lane, its generation items in the step: trajectories (`replica`, `start_ns`, `end_ns`) when
    known, else its generation states."""
    items: dict[str, list[tuple[int, int]]] = {}
    if trajectories:
        for t in trajectories:
            if t.get("replica") and t.get("end_ns") is not None and t["end_ns"] > a and t["start_ns"] < b:
                items.setdefault(t["replica"], []).append((max(t["start_ns"], a), min(t["end_ns"], b)))
        if items:
            return items
    for e in _elements(spans, a, b, now_ns):
        if phase(e["name"], e["lane"]) == "generation":
            items.setdefault(e["lane"], []).append((e["start_ns"], e["end_ns"]))
    return items


def _lane_end_after_cut(lane_items: list[tuple[int, int]], cut: set[tuple[int, int]]) -> int | None:
    """The lane's generation end without the cut items: each kept item moves earlier by the cut items that ended
    before it began (a sequential lane's later work shifts; concurrent items do not)."""
    kept_end = None
    for item in lane_items:
        if item in cut:
            continue
        shift = sum(c[1] - c[0] for c in cut if c[1] <= item[0])
        end = item[1] - shift
        kept_end = end if kept_end is None else max(kept_end, end)
    return kept_end


def what_if(path: dict[str, Any], items: dict[str, list[tuple[int, int]]], *, cut_percent: float | None = None,
            stage: str | None = None, faster_percent: float | None = None) -> dict[str, Any]:
    """Estimated seconds saved in this step: `tail`, `bubbles`, and when asked `cut` (slowest cut_percent % of the
    generation items) and `stage` (that stage faster_percent % faster). Estimates: one change at a time."""
    gen_on_path = [e for e in path["elements"] if e["lane"] in items]
    out: dict[str, Any] = {"bubbles_s": path["bubbles_s"], "tail_s": 0.0}
    last_gen_end = max((e["end_ns"] for e in gen_on_path), default=None)
    ends = sorted(((max(x[1] for x in v), lane) for lane, v in items.items() if v), reverse=True)
    if last_gen_end is not None and len(ends) >= 2 and any(e["lane"] == ends[0][1] for e in gen_on_path):
        out["tail_s"] = max(0.0, (ends[0][0] - ends[1][0]) / NS)
        out["tail_lane"] = ends[0][1]
    if cut_percent is not None:
        out["cut_percent"] = cut_percent
        out["cut_s"] = cut_saving(path, items, cut_percent)
    if stage is not None and faster_percent is not None:
        on_path = path["by_stage"].get(stage, 0.0)
        out.update({"stage": stage, "faster_percent": faster_percent, "stage_s": on_path * faster_percent / 100})
    return out


def cut_saving(path: dict[str, Any], items: dict[str, list[tuple[int, int]]], cut_percent: float) -> float:
    """Seconds saved if the slowest cut_percent % of the generation items were not waited for (see the module)."""
    gen_on_path = [e for e in path["elements"] if e["lane"] in items]
    if not gen_on_path:
        return 0.0
    every = sorted(((x[1] - x[0], lane, x) for lane, v in items.items() for x in v), reverse=True)
    n = math.floor(len(every) * cut_percent / 100 + 1e-9)
    if n <= 0:
        return 0.0
    cut_by_lane: dict[str, set[tuple[int, int]]] = {}
    for _, lane, x in every[:n]:
        cut_by_lane.setdefault(lane, set()).add(x)
    before = max(max(x[1] for x in v) for v in items.values() if v)
    after_ends = [_lane_end_after_cut(v, cut_by_lane.get(lane, set())) for lane, v in items.items()]
    after = max((e for e in after_ends if e is not None), default=min(x[0] for v in items.values() for x in v))
    # only the part of the generation the path waited on: bounded by the generation time on the path
    on_path = sum(e["seconds"] for e in gen_on_path)
    return max(0.0, min((before - after) / NS, on_path))


def step_whatif_rows(path: dict[str, Any], items: dict[str, list[tuple[int, int]]]) -> list[tuple[str, str, float]]:
    """The step_stats rows a step keeps so any window's critical path and savings come without its spans
    (server/runstore/steps/step_stats.py): seconds on the path per stage and lane, the gaps, the what-if savings."""
    rows = [("@cp", name, sec) for name, sec in path["by_stage"].items()]
    rows += [("@cplane", lane, sec) for lane, sec in path["by_lane"].items()]
    w = what_if(path, items)
    rows += [("@whatif", "bubbles", w["bubbles_s"]), ("@whatif", "tail", w["tail_s"])]
    rows += [("@whatif", f"cut{k}", cut_saving(path, items, k)) for k in CUT_PERCENTS]
    return rows

"""Where the time went between two runs (or two windows of one run): steps aligned by step number, the difference
split by stage and by lane class, the lanes that account for most of it, and one paragraph in plain words. Pure:
per-step facts in (the server reads them from its stored per-step rows, the offline analysis computes them from its
event table), plain dicts out.

A step's facts: {"duration_s", "states": {state: s (union across lanes)}, "gen": {rollout lane: generation s},
"lanes": {lane: busy s}, "cp": {state: s on the critical path}, "whatif": {name: s saved}}; any part may be empty.

Definitions (docs/explain.md):
* per step, Δ = B − A of the aligned step (same step number); the summary is the mean over aligned steps, the
  medians say how long a step usually took;
* by stage: the mean Δ of each state's time (the step breakdown); by lane class: the mean Δ of busy time summed
  over the lanes of a class (rollout replicas, trainer ranks, TransferQueue, other) — several lanes busy at once
  count each;
* the lanes that account for it: the rollout lanes whose generation time grew most, and how often each was the
  slowest (the long tail) in B's steps; the trainer lanes whose busy time grew most;
* a stage or class is "unchanged" when its |mean Δ| is under max(10 ms, 2 % of A's median step).
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Mapping

from .critical_path import CUT_PERCENTS
from .insights import phase

Facts = Mapping[str, Any]


def lane_class(lane: str) -> str:
    low = lane.lower()
    if low.startswith(("replica", "rollout")) or "/replica" in low:
        return "rollout replicas"
    if low.startswith("rank") or "/rank" in low:
        return "trainer ranks"
    if low.startswith(("tq", "transfer_queue", "transferqueue")):
        return "TransferQueue"
    return "other lanes"


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _mean_delta(steps: list[int], a: Mapping[int, Facts], b: Mapping[int, Facts], part: str) -> dict[str, float]:
    keys = {k for s in steps for k in (*a[s].get(part, {}), *b[s].get(part, {}))}
    return {k: _mean([b[s].get(part, {}).get(k, 0.0) - a[s].get(part, {}).get(k, 0.0) for s in steps]) for k in keys}


def lane_summary(steps: list[int], runs: Mapping[int, Facts]) -> dict[str, Any]:
    """Over the aligned steps: each lane's busy and generation seconds summed, and how many steps each rollout lane
    was the slowest in (of `gen_steps` steps with two or more rollout lanes). The server sums the same in SQL."""
    busy: dict[str, float] = {}
    gen: dict[str, float] = {}
    slowest: dict[str, int] = {}
    gen_steps = 0
    for s in steps:
        for lane, v in runs[s].get("lanes", {}).items():
            busy[lane] = busy.get(lane, 0.0) + v
        g = runs[s].get("gen", {})
        for lane, v in g.items():
            gen[lane] = gen.get(lane, 0.0) + v
        if len(g) >= 2:
            gen_steps += 1
            slow = max(g, key=lambda lane: g[lane])
            slowest[slow] = slowest.get(slow, 0) + 1
    return {"busy": busy, "gen": gen, "slowest": slowest, "gen_steps": gen_steps}


def diff(a: Mapping[int, Facts], b: Mapping[int, Facts], names: tuple[str, str] = ("A", "B"),
         lanes_a: Mapping[str, Any] | None = None, lanes_b: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The diff of two runs' per-step facts (see the module); `lanes_a` / `lanes_b`: their lane_summary over the
    aligned steps when the caller has it (then the facts need no per-lane parts)."""
    steps = sorted(set(a) & set(b))
    if not steps:
        return {"names": list(names), "aligned_steps": 0, "steps": [], "sentence":
                f"{names[0]} and {names[1]} have no step number in common: nothing to align.", "by_stage": {},
                "by_class": {}, "lanes": []}
    rows = [{"step": s, "a_s": a[s]["duration_s"], "b_s": b[s]["duration_s"],
             "delta_s": b[s]["duration_s"] - a[s]["duration_s"],
             "stages": {k: v for k, v in _mean_delta([s], a, b, "states").items() if abs(v) > 1e-9}} for s in steps]
    med_a = statistics.median(a[s]["duration_s"] for s in steps)
    med_b = statistics.median(b[s]["duration_s"] for s in steps)
    mean_delta = _mean([r["delta_s"] for r in rows])
    by_stage = dict(sorted(_mean_delta(steps, a, b, "states").items(), key=lambda kv: -abs(kv[1])))
    la = lanes_a if lanes_a is not None else lane_summary(steps, a)
    lb = lanes_b if lanes_b is not None else lane_summary(steps, b)
    n = len(steps)

    def per_step_delta(part: str) -> dict[str, float]:
        return {k: (lb[part].get(k, 0.0) - la[part].get(k, 0.0)) / n for k in {*la[part], *lb[part]}}

    classes: dict[str, float] = {}
    for lane, d in per_step_delta("busy").items():
        classes[lane_class(lane)] = classes.get(lane_class(lane), 0.0) + d
    by_class = dict(sorted(classes.items(), key=lambda kv: -abs(kv[1])))
    gen_delta = per_step_delta("gen")
    slow_a = {k: v / la["gen_steps"] for k, v in la["slowest"].items()} if la["gen_steps"] else {}
    slow_b = {k: v / lb["gen_steps"] for k, v in lb["slowest"].items()} if lb["gen_steps"] else {}
    lanes: list[dict[str, Any]] = [{"lane": lane, "class": "rollout replicas", "generation_delta_s": d,
                                    "slowest_share_a": slow_a.get(lane, 0.0), "slowest_share_b": slow_b.get(lane, 0.0)}
                                   for lane, d in gen_delta.items()]
    lanes += [{"lane": lane, "class": lane_class(lane), "busy_delta_s": d} for lane, d in per_step_delta("busy").items()
              if lane not in gen_delta and lane_class(lane) != "rollout replicas"]
    lanes.sort(key=lambda x: -abs(float(x.get("generation_delta_s", x.get("busy_delta_s", 0.0)))))
    threshold = max(0.01, 0.02 * med_a)
    # the runs' own step-to-step noise: the standard error of the mean of the per-step changes. A change within twice
    # that (two runs of the same job, the same fault twice) is no difference, whatever its stages say
    deltas = [r["delta_s"] for r in rows]
    noise = statistics.stdev(deltas) / math.sqrt(n) if n >= 3 else 0.0
    significant = n < 3 or noise == 0 or (abs(mean_delta) > 2 * noise and abs(mean_delta) >= threshold)
    out = {"names": list(names), "aligned_steps": len(steps), "median_a_s": med_a, "median_b_s": med_b,
           "mean_delta_s": mean_delta, "change": (med_b - med_a) / med_a if med_a else None, "steps": rows,
           "by_stage": by_stage, "by_class": by_class, "lanes": lanes[:10], "threshold_s": threshold,
           "noise_s": noise, "significant": significant}
    out["sentence"] = sentence(out, slow_b)
    return out


def _fmt(s: float) -> str:
    a = abs(s)
    return f"{s * 1000:+.0f} ms" if a < 1 else f"{s:+.2f} s" if a < 120 else f"{s / 60:+.1f} min"


def sentence(d: dict[str, Any], slow_b: Mapping[str, float]) -> str:
    """One paragraph: how much longer or shorter, the stages that moved (with the lanes behind a generation change),
    and what did not move."""
    a_name, b_name = d["names"]
    med_a, med_b, th = d["median_a_s"], d["median_b_s"], d["threshold_s"]
    change = d["change"] or 0.0
    longer = "longer" if change > 0 else "shorter"
    how = "about as long as" if abs(change) < 0.02 else f"{abs(change) * 100:.0f} % {longer} than"
    head = (f"{b_name}'s steps are {how} {a_name}'s (median {med_b:.2f} s vs {med_a:.2f} s over {d['aligned_steps']} "
            f"aligned step{'s' if d['aligned_steps'] != 1 else ''})")
    if not d.get("significant", True):
        return (f"No significant difference between {b_name} and {a_name}: their steps differ by "
                f"{_fmt(d['mean_delta_s'])} on average, within the runs' own step-to-step noise "
                f"(±{_fmt(2 * d['noise_s']).lstrip('+')} over {d['aligned_steps']} aligned steps); no cause is named.")
    moved = [(k, v) for k, v in d["by_stage"].items() if abs(v) >= th]
    parts = []
    for name, v in moved[:3]:
        text = f"{_fmt(v)} a step in {name}"
        if phase(name, "") == "generation":
            grew = [x for x in d["lanes"] if "generation_delta_s" in x and x["generation_delta_s"] * v > 0
                    and abs(x["generation_delta_s"]) >= th]
            if grew:
                lead = grew[0]
                text += f", from {lead['lane']}"
                share = slow_b.get(lead["lane"], 0.0)
                details = [f"{_fmt(lead['generation_delta_s'])} of generation a step"]
                if share >= 0.5:
                    details.append(f"the slowest replica in {share * 100:.0f} % of {b_name}'s steps")
                text += f" ({'; '.join(details)})"
                if len(grew) > 1 and abs(grew[1]["generation_delta_s"]) >= 0.25 * abs(lead["generation_delta_s"]):
                    text += f" and {grew[1]['lane']}"
        parts.append(text)
    training = [k for k in d["by_stage"] if phase(k, "rank_0") == "training" and phase(k, "") == "other"]
    still = [k for k in training if abs(d["by_stage"][k]) < th]
    tail_words = ""
    if training and len(still) == len(training):
        tail_words = "; training is unchanged"
    elif not moved:
        tail_words = "; no stage moved by more than " + _fmt(th).lstrip("+")
    return head + (": " + "; ".join(parts) if parts else "") + tail_words + "."


def savings(facts: dict[int, dict], *, cut_percent: int = 10, stage: str | None = None,
            faster_percent: float | None = None) -> dict[str, Any]:
    """Over a window of steps: each what-if's median saving per step and its total, the biggest single fix, and
    where the path runs (the stages and lanes with the most time on it)."""
    if cut_percent not in CUT_PERCENTS:
        raise ValueError(f"cut_percent must be one of {list(CUT_PERCENTS)} over a window (any value for one step)")
    steps = sorted(facts)
    per: dict[str, list[float]] = {"tail": [], "bubbles": [], f"cut{cut_percent}": []}
    if stage and faster_percent is not None:
        per[f"stage:{stage}"] = []
    for s in steps:
        w = facts[s]["whatif"]
        per["tail"].append(w.get("tail", 0.0))
        per["bubbles"].append(w.get("bubbles", 0.0))
        per[f"cut{cut_percent}"].append(w.get(f"cut{cut_percent}", 0.0))
        if stage and faster_percent is not None:
            per[f"stage:{stage}"].append(facts[s]["cp"].get(stage, 0.0) * faster_percent / 100)
    out = {k: {"median_s": statistics.median(v) if v else 0.0, "total_s": sum(v)} for k, v in per.items()}
    best = max(out.items(), key=lambda kv: kv[1]["total_s"], default=None)
    n = len(steps) or 1
    stages: dict[str, float] = {}
    lanes: dict[str, float] = {}
    for s in steps:
        for k, v in facts[s]["cp"].items():
            stages[k] = stages.get(k, 0.0) + v / n
        for k, v in facts[s]["cplane"].items():
            lanes[k] = lanes.get(k, 0.0) + v / n
    durations = [facts[s]["duration_s"] for s in steps]
    return {"steps": len(steps), "median_step_s": statistics.median(durations) if durations else None,
            "what_if": out, "biggest": None if best is None or best[1]["total_s"] <= 0 else best[0],
            "path_stages": dict(sorted(stages.items(), key=lambda kv: -kv[1])[:10]),
            "path_lanes": dict(sorted(lanes.items(), key=lambda kv: -kv[1])[:10])}


def describe(what: str) -> str:
    if what == "tail":
        return "the long-tail replica finishing with the others"
    if what == "bubbles":
        return "removing the idle gaps on the critical path"
    if what.startswith("cut"):
        return f"not waiting for the slowest {what[3:]} % of generations"
    return f"{what.split(':', 1)[1]} faster"

"""What a run contributes to TensorBoard / W&B: its trainer scalars at their step, and the insight
metrics only rl-insight computes (per-step state breakdown, rollout long tail, overlap, staleness, the goodput
ledger's device-seconds by reason, goodput and tokens by fate) under `rl_insight/…` at the step they describe."""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Any, Iterable, Iterator, Mapping

from . import Point

INSIGHT_PREFIX = "rl_insight/"
# the ledger's points: a step's come once it is summarized, after its other insights (their own export cursor)
LEDGER_TAGS = (INSIGHT_PREFIX + "ledger_seconds/", INSIGHT_PREFIX + "goodput", INSIGHT_PREFIX + "tokens/")


def is_ledger_point(p: Point) -> bool:
    return p.tag.startswith(LEDGER_TAGS)


@lru_cache(maxsize=65536)
def series_tag(name: str, labels_json: str) -> str:
    """`name`, or `name/k=v,…` for a labelled series (each label set is its own curve)."""
    try:
        labels = json.loads(labels_json) if labels_json else {}
    except ValueError:
        labels = {}
    if not labels:
        return name
    return name + "/" + ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def insight_points(summary: dict[str, Any], wall_time: float) -> Iterator[Point]:
    """Insight metrics keyed by step, from `insights.summarize(...)`."""
    for s in summary.get("steps", []):
        step = int(s["step"])
        yield Point(INSIGHT_PREFIX + "step/duration_s", step, wall_time, float(s["duration_s"]))
        total = s["duration_s"] or 0.0
        for state, sec in s["states"].items():
            yield Point(INSIGHT_PREFIX + f"step_state_seconds/{state}", step, wall_time, float(sec))
            if total > 0:
                yield Point(INSIGHT_PREFIX + f"step_state_share/{state}", step, wall_time, float(sec) / total)
    for t in summary.get("long_tail", []):
        if math.isfinite(t["ratio"]):
            yield Point(INSIGHT_PREFIX + "rollout_long_tail_ratio", int(t["step"]), wall_time, float(t["ratio"]))
    for led in summary.get("ledger_steps", []):  # the goodput ledger (docs/ledger.md), each step once summarized
        step, total = int(led["step"]), float(led["total"])
        for reason, sec in led["reasons"].items():
            yield Point(INSIGHT_PREFIX + f"ledger_seconds/{reason}", step, wall_time, float(sec))
        if total > 0:
            yield Point(INSIGHT_PREFIX + "goodput", step, wall_time, float(led["reasons"].get("training", 0.0)) / total)
        for category, tokens in led.get("tokens", {}).items():
            if isinstance(tokens, (int, float)) and category != "groups":
                yield Point(INSIGHT_PREFIX + f"tokens/{category}", step, wall_time, float(tokens))
    steps = summary.get("steps") or []
    if steps:
        last = int(steps[-1]["step"])
        ov = summary.get("overlap") or {}
        if "overlap_ratio" in ov:
            yield Point(INSIGHT_PREFIX + "rollout_training_overlap_ratio", last, wall_time, float(ov["overlap_ratio"]))
        st = summary.get("staleness")
        if st:
            yield Point(INSIGHT_PREFIX + "staleness_mean", last, wall_time, float(st["mean"]))
            yield Point(INSIGHT_PREFIX + "staleness_max", last, wall_time, float(st["max"]))
        lanes = summary.get("lanes") or {}
        for lane, v in lanes.items():
            yield Point(INSIGHT_PREFIX + f"lane_utilization/{lane}", last, wall_time, float(v["utilization"]))


def config_text(run: Mapping[str, Any], extra: Iterable[tuple[str, Any]] = ()) -> str:
    """The run's identity and config as a markdown table (TensorBoard text / W&B config)."""
    rows = [("project", run.get("project")), ("experiment_name", run.get("experiment_name")),
            ("first_seen", run.get("first_seen")), ("last_step", run.get("last_step")), *extra]
    return "| key | value |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)

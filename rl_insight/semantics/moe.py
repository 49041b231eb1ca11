"""MoE expert load, as verl reports it for its rollouts (`rollout/moe/*`, verl/trainer/ppo/metric_utils.py) — the
shared definitions, and the summary the run page and the API show.

verl counts, per MoE layer, how many routed-expert assignments each expert got in the step's response tokens, and
logs, per layer i, the *violation* of uniform load: with share_e = count_e / Σ counts, deviation_e = share_e ×
n_experts − 1 (0: exactly its fair share; 1.5: 2.5× it; −1: unused),
`rollout/moe/max_vio/layer_i` = max_e, `min_vio/layer_i` = min_e, `avg_vio/layer_i` = mean_e |deviation_e|, and
the max / avg of each over layers (`max_vio/max`, …). verl does not log which expert is the hot one. A job that
wants it named logs each expert's share as `rollout/moe/load/layer_i/expert_j` (the demo's `--moe` does); then the
page shows layers × experts as well.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

PREFIX = "rollout/moe"
VIO = re.compile(r"^rollout_moe_(max|min|avg)_vio_layer_(\d+)$")  # sanitized names, as stored and exposed
LOAD = re.compile(r"^rollout_moe_load_layer_(\d+)_expert_(\d+)$")


def load_balance_metrics(counts: Sequence[Sequence[float]], prefix: str = PREFIX) -> dict[str, float]:
    """verl's metrics from a [layers][experts] count matrix (the same formulas), plus each expert's share under
    `{prefix}/load/layer_i/expert_j`."""
    out: dict[str, float] = {}
    maxes, mins, avgs = [], [], []
    for i, row in enumerate(counts):
        total = max(1.0, float(sum(row)))
        n = len(row)
        shares = [c / total for c in row]
        dev = [s * n - 1.0 for s in shares]
        mx, mn, avg = max(dev), min(dev), sum(abs(d) for d in dev) / n
        maxes.append(mx)
        mins.append(mn)
        avgs.append(avg)
        out[f"{prefix}/max_vio/layer_{i}"], out[f"{prefix}/min_vio/layer_{i}"] = mx, mn
        out[f"{prefix}/avg_vio/layer_{i}"] = avg
        for j, s in enumerate(shares):
            out[f"{prefix}/load/layer_{i}/expert_{j}"] = s
    for name, xs in (("max_vio", maxes), ("min_vio", mins), ("avg_vio", avgs)):
        if xs:
            out[f"{prefix}/{name}/max"], out[f"{prefix}/{name}/avg"] = max(xs), sum(xs) / len(xs)
    return out


def summary(vio: dict[int, list[tuple[float, float]]], loads: dict[tuple[int, int], float] | None,
            load_step: float | None) -> dict[str, Any]:
    """The heatmaps' data: per layer, max_vio by step (`vio`: layer → [(step, max_vio)]); the worst cell named; and,
    with per-expert shares at `load_step`, the layers × experts matrix with the hottest expert named."""
    layers = sorted(vio)
    steps = sorted({s for pts in vio.values() for s, _ in pts})
    index = {s: k for k, s in enumerate(steps)}
    grid: list[list[float | None]] = [[None] * len(steps) for _ in layers]
    worst: dict[str, Any] | None = None
    for r, layer in enumerate(layers):
        for s, v in vio[layer]:
            grid[r][index[s]] = v
            if worst is None or v > worst["max_vio"]:
                worst = {"layer": layer, "step": s, "max_vio": v, "times_fair": v + 1.0}
    out: dict[str, Any] = {"layers": layers, "steps": steps, "max_vio": grid, "worst": worst, "experts": None}
    last = [(cell, layers[r]) for r, row in enumerate(grid) if steps and (cell := row[-1]) is not None]
    if last:
        top, layer = max(last)
        out["latest"] = {"step": steps[-1], "layer": layer, "max_vio": top}
    if loads:
        n_layers = max(lay for lay, _ in loads) + 1
        n_experts = max(e for _, e in loads) + 1
        matrix = [[loads.get((lay, e)) for e in range(n_experts)] for lay in range(n_layers)]
        (hl, he), share = max(loads.items(), key=lambda kv: kv[1])
        out["experts"] = {"step": load_step, "load": matrix, "hot": {"layer": hl, "expert": he, "share": share,
                                                                    "times_fair": share * n_experts}}
    out["sentence"] = _sentence(out)
    return out


def _sentence(s: dict[str, Any]) -> str:
    if not s["layers"]:
        return "No MoE load-balance metrics in this run (verl logs rollout/moe/* when moe_lb_metrics_interval > 0)."
    parts = []
    if s.get("latest"):
        lt = s["latest"]
        parts.append(f"at step {lt['step']:g}, layer {lt['layer']} is the most imbalanced: its busiest expert gets "
                     f"{lt['max_vio'] + 1:.1f}× its fair share")
    if s["experts"] and s["experts"]["hot"]:
        h = s["experts"]["hot"]
        parts.append(f"the hottest expert is {h['expert']} of layer {h['layer']} ({100 * h['share']:.1f} % of the "
                     f"layer's assignments, {h['times_fair']:.1f}× fair)")
    w = s["worst"]
    if w:
        parts.append(f"worst so far: layer {w['layer']} at step {w['step']:g} ({w['times_fair']:.1f}× fair)")
    return "; ".join(parts) + "."

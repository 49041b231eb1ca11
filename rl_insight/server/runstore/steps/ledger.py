"""A run's goodput ledger over a window of steps (semantics/ledger.py, docs/ledger.md): from the "@ledger" rows the
insight rounds keep per step (step_stats.py), steps not summarized yet computed from their spans (a few), the others
listed as pending.

Devices: a trainer lane is one device; a rollout lane counts its tensor-parallel size when the run's config says it
(verl's `actor_rollout_ref.rollout.tensor_model_parallel_size`), else one, and `devices_note` says which; other lanes
one. Invariant: every step's reasons add up to `total` = `wall_s` × `devices` (the ledger tiles each lane's window).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ....semantics import ledger, token_ledger
from ....semantics.names import sanitize_metric_name
from .. import queries as q
from ..backend import StoreConnection
from .step_stats import ledger_rows

FALLBACK_STEPS = 16  # steps not summarized yet computed from spans in one answer; later ones are pending
NS = 1e9
TP_KEYS = ("rollout.tensor_model_parallel_size", "rollout.tp_size", "rollout.tensor_parallel_size")


def rollout_devices(config: Mapping[str, Any] | None) -> tuple[float, str]:
    """Devices per rollout replica from the run's config (flattened or nested keys), and the words that say so."""
    def walk(d: Any, prefix: str = "") -> Any:
        if isinstance(d, Mapping):
            for k, v in d.items():
                key = f"{prefix}.{k}" if prefix else str(k)
                if any(key.endswith(t) for t in TP_KEYS) and isinstance(v, (int, float)) and not isinstance(v, bool):
                    return key, v
                found = walk(v, key)
                if found:
                    return found
        return None

    found = walk(config or {})
    if found and 1 <= found[1] <= 1024:
        n = found[1]
        unit = "device" if n == 1 else "devices"
        return float(n), f"each rollout replica counts {n:g} {unit} (the run's config: {found[0]})"
    return 1.0, ("each rollout replica counts one device: the run's config does not say its tensor-parallel size "
                 "(actor_rollout_ref.rollout.tensor_model_parallel_size)")


def step_token_inputs(conn: StoreConnection, run_id: int, lo: int, hi: int
                      ) -> tuple[dict[int, dict[str, float]], dict[int, list[tuple[str | None, float | None]]]]:
    """For steps lo..hi: the metrics the token ledger reads, {step: {name as logged: its last value}}, and the steps'
    trajectories, {step: [(status, tokens out)]}."""
    by_stored = {sanitize_metric_name(n): n for n in token_ledger.wanted_metrics()}
    names = list(by_stored)
    metrics: dict[int, dict[str, float]] = {}
    for name, step, value in conn.execute(
            f"SELECT s.name, p.step, p.value FROM samples p JOIN series s ON s.id = p.series_id WHERE s.run_id = ? "
            f"AND s.name IN ({','.join('?' * len(names))}) AND p.step >= ? AND p.step <= ? AND p.value IS NOT NULL "
            f"ORDER BY p.ts", (run_id, *names, lo, hi)):
        metrics.setdefault(int(step), {})[by_stored[name]] = value
    trajectories: dict[int, list[tuple[str | None, float | None]]] = {}
    for step, status, tokens in conn.execute(
            "SELECT step, status, tokens_out FROM trajectories WHERE run_id = ? AND step >= ? AND step <= ?",
            (run_id, lo, hi)):
        trajectories.setdefault(int(step), []).append((status, tokens))
    return metrics, trajectories


def stored_lane_seconds(conn: StoreConnection, run_id: int) -> dict[str, float]:
    """The run's summarized steps' ledger, summed: lane-seconds by "class:reason"."""
    return {name: total for name, total in conn.execute(
        "SELECT name, sum(value) FROM step_stats WHERE run_id = ? AND lane = '@ledger' GROUP BY name", (run_id,))}


def weigh(rows: Mapping[str, float], lanes: Mapping[str, float], per_replica: float) -> tuple[dict[str, float], float]:
    """Lane-seconds by "class:reason" (the stored rows) as device-seconds by reason, and the devices of `lanes` (lane
    counts by class)."""
    weight = {"trainer": 1.0, "rollout": per_replica, "other": 1.0}
    parts: dict[str, list[float]] = {}
    for key, sec in rows.items():
        cls, _, reason = key.partition(":")
        parts.setdefault(reason, []).append(sec * weight.get(cls, 1.0))
    # (fsum: exactly rounded, so the answer does not depend on the order the store returned the rows in)
    return {r: math.fsum(v) for r, v in parts.items()}, math.fsum(n * weight.get(cls, 1.0) for cls, n in lanes.items())


def run_ledger(conn: StoreConnection, run_id: int, windows: list[tuple[int, int, int]], now_ns: int,
               config: Mapping[str, Any] | None, gpu_hour_cost: float | None = None,
               fallback: int = FALLBACK_STEPS) -> dict[str, Any]:
    """{steps: [{step, wall_s, devices, total, reasons, tokens, cost}], run: {...}, goodput, token_goodput, sentence,
    tokens_sentence, devices_note, pending, cost} (`cost`: with a price per device-hour, the window's, a step's on
    average, per 1,000 trained-on tokens, and what the time that did not train cost; else null). Up to `fallback`
    steps not summarized yet are computed from their spans, the others are `pending`."""
    per_replica, note = rollout_devices(config)
    bounds = {s: (a, b) for s, a, b in windows}
    rows: dict[int, dict[str, float]] = {}
    lanes: dict[int, dict[str, float]] = {}
    wanted = list(bounds)
    for i in range(0, len(wanted), 500):
        part = wanted[i:i + 500]
        for step, lane, name, value in conn.execute(
                f"SELECT step, lane, name, value FROM step_stats WHERE run_id = ? AND step IN "
                f"({','.join('?' * len(part))}) AND lane IN ('@ledger', '@ledger_lanes')", (run_id, *part)):
            (rows if lane == "@ledger" else lanes).setdefault(step, {})[name] = value
    missing = [s for s in wanted if s not in lanes]
    for step in missing[:fallback]:
        a, b = bounds[step]
        wide = q.spans_in(conn, run_id, a - (b - a), b, attributes="cut_short")  # (lanes still down at its start)
        spans = [s for s in wide if s["end_ns"] is None or s["end_ns"] > a]
        before = [s for s in wide if s["end_ns"] is not None and s["end_ns"] <= a]
        for lane, name, value in ledger_rows(spans, a, b, now_ns, before):
            (rows if lane == "@ledger" else lanes).setdefault(step, {})[name] = value
    metrics, trajectories = step_token_inputs(conn, run_id, min(wanted), max(wanted)) if wanted else ({}, {})
    price = gpu_hour_cost / 3600.0 if gpu_hour_cost is not None else None
    steps: list[dict[str, Any]] = []
    run_reasons: dict[str, float] = {}
    run_tokens: dict[str, float | None] = {}
    run_wall = run_total = 0.0
    for step, a, b in windows:
        if step not in lanes:
            continue
        reasons, devices = weigh(rows.get(step, {}), lanes[step], per_replica)
        total = math.fsum(reasons.values())
        tokens = token_ledger.step_tokens(metrics.get(step, {}), trajectories.get(step, ()))
        token_ledger.add(run_tokens, tokens)
        steps.append({"step": step, "wall_s": (b - a) / NS, "devices": devices, "total": total,
                      "reasons": dict(sorted(reasons.items(), key=lambda x: -x[1])), "tokens": tokens,
                      "cost": total * price if price is not None else None})
        run_wall += (b - a) / NS
        run_total += total
        for r, v in reasons.items():
            run_reasons[r] = run_reasons.get(r, 0.0) + v
    run = {"wall_s": run_wall, "total": run_total, "reasons": dict(sorted(run_reasons.items(), key=lambda x: -x[1])),
           "tokens": {c: run_tokens.get(c) for c in (*token_ledger.CATEGORIES, "unaccounted")}}
    trained, generated = run_tokens.get(token_ledger.TRAINED), run_tokens.get(token_ledger.GENERATED)
    cost = None
    if price is not None and steps:
        cost = {"per_device_hour": gpu_hour_cost, "total": run_total * price,
                "per_step": run_total * price / len(steps),
                "per_1k_trained_tokens": run_total * price * 1000 / trained if trained else None,
                "not_training": (run_total - run_reasons.get(ledger.USEFUL, 0.0)) * price}
    return {"run_id": run_id, "steps": steps, "run": run,
            "goodput": run_reasons.get(ledger.USEFUL, 0.0) / run_total if run_total > 0 else None,
            "token_goodput": trained / generated if trained is not None and generated else None,
            "sentence": ledger.sentence(run_reasons), "tokens_sentence": token_ledger.sentence(run_tokens),
            "devices_note": note, "pending": missing[fallback:], "cost": cost}


def ledger_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Two runs' ledgers (run_ledger) side by side: the mean device-seconds a step, and by reason B minus A."""
    def per_step(d: Mapping[str, Any]) -> tuple[float, dict[str, float]]:
        n = len(d["steps"]) or 1
        return d["run"]["total"] / n, {r: v / n for r, v in d["run"]["reasons"].items()}

    (ta, ra), (tb, rb) = per_step(a), per_step(b)
    delta = {r: rb.get(r, 0.0) - ra.get(r, 0.0) for r in set(ra) | set(rb)}
    delta = dict(sorted(delta.items(), key=lambda x: -abs(x[1])))
    more = [(r, v) for r, v in delta.items() if v > 0][:3]
    if not a["steps"] or not b["steps"]:
        words = "No ledger to compare: a run has no complete step."
    elif tb - ta > 0 and more:
        words = (f"B spends {tb - ta:.3g} device-seconds a step more than A; they went to "
                 + ", ".join(f"{ledger.spoken(r)} (+{v:.3g})" for r, v in more) + ".")
    else:
        words = f"B spends {ta - tb:.3g} device-seconds a step less than A."
    return {"a_per_step_s": ta, "b_per_step_s": tb, "by_reason": delta, "sentence": words}

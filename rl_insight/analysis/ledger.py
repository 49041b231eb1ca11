"""The goodput ledger offline (docs/ledger.md): the same attribution the server keeps per step
(rl_insight.semantics.ledger), computed from the event table's stages, and the token ledger from a verl log's
metrics (rl_insight.semantics.token_ledger), so a run profiled and monitored at once gets one answer both ways.

Steps are the events' steps (file names or step marks). A step's window ends with its last stage, and begins where
the step before it ended (the first step: with its first stage), as online a step runs from one step metric to the
next: the time between two steps (a barrier, the driver's own work) belongs to the next one, not to none. The lanes
counted are those with a stage in the step. Every lane counts one device (traces do not say a
replica's tensor-parallel size): `devices_note` says so. Invariant: each step's reasons add up to `wall_s` × `devices`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..semantics import ledger, token_ledger

NS = 1e9
DEVICES_NOTE = "each lane counts one device (profiler traces do not say a rollout replica's tensor-parallel size)"


def _stage_spans(st: pd.DataFrame) -> list[dict[str, Any]]:
    return [{"name": str(n), "lane": str(lane), "kind": "state", "start_ns": int(s), "end_ns": int(e)}
            for n, lane, s, e in zip(st["name"], st["lane"], st["start_ns"], st["end_ns"])]


def trace_ledger(df: pd.DataFrame, metrics: pd.DataFrame | None = None) -> dict[str, Any]:
    """{steps: [{step, wall_s, devices, total, reasons, tokens}], run: {wall_s, total, reasons, tokens}, goodput,
    token_goodput, sentence, tokens_sentence, devices_note} — the online answer's shape (less cost and pending)."""
    st = df[(df["category"] == "annotation") & (df["depth"] == 0)].dropna(subset=["step"]) if not df.empty else df
    rows = {int(k): {str(n): float(v) for n, v in r.items() if isinstance(v, (int, float))}
            for k, r in (metrics.to_dict(orient="index") if metrics is not None and not metrics.empty else {}).items()}
    steps: list[dict[str, Any]] = []
    run_reasons: dict[str, float] = {}
    run_tokens: dict[str, float | None] = {}
    wall = 0.0
    previous: tuple[int, int] | None = None  # (step, end) of the step before
    for step, group in (st.groupby("step") if not st.empty else ()):
        a, b = int(group["start_ns"].min()), int(group["end_ns"].max())
        if previous is not None and previous[0] == int(step) - 1 and previous[1] < b:
            a = previous[1]  # contiguous with the step before (see the module docstring)
        previous = (int(step), b)
        if b <= a:
            continue
        per_lane = ledger.step_ledger(_stage_spans(group), a, b, b)
        reasons = ledger.totals(per_lane)
        tokens = token_ledger.step_tokens(rows.get(int(step), {}))
        token_ledger.add(run_tokens, tokens)
        steps.append({"step": int(step), "wall_s": (b - a) / NS, "devices": float(len(per_lane)),
                      "total": sum(reasons.values()), "reasons": dict(sorted(reasons.items(), key=lambda x: -x[1])),
                      "tokens": tokens})
        wall += (b - a) / NS
        for r, v in reasons.items():
            run_reasons[r] = run_reasons.get(r, 0.0) + v
    if not steps:  # a verl log alone: its tokens, no time
        for logged in rows.values():
            token_ledger.add(run_tokens, token_ledger.step_tokens(logged))
    total = sum(run_reasons.values())
    trained, generated = run_tokens.get(token_ledger.TRAINED), run_tokens.get(token_ledger.GENERATED)
    return {"steps": steps,
            "run": {"wall_s": wall, "total": total,
                    "reasons": dict(sorted(run_reasons.items(), key=lambda x: -x[1])),
                    "tokens": {c: run_tokens.get(c) for c in (*token_ledger.CATEGORIES, "unaccounted")}},
            "goodput": run_reasons.get(ledger.USEFUL, 0.0) / total if total > 0 else None,
            "token_goodput": trained / generated if trained is not None and generated else None,
            "sentence": ledger.sentence(run_reasons), "tokens_sentence": token_ledger.sentence(run_tokens),
            "devices_note": DEVICES_NOTE}

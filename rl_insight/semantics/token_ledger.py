"""The token ledger (docs/ledger.md): a step's generated tokens split by what became of them, from what the job
reports, never guessed. Pure functions: a step's metric values (and its trajectories' token counts) in, counts out.

Categories: `trained` (in the batch the step trained on), `filtered` (dropped before training: zero-variance groups,
dynamic sampling), `stale` (rejected as too off-policy), `aborted` (aborted or partial, not trained), which add up to
`generated` when all are known (`unaccounted` is the remainder then); `truncated` is the part of `trained` in
responses cut at the length cap.

Sources, the first that answers for each category:

1. the job's own counts, `tokens/<category>` (a verl job adds them to its metrics dict; the demo does);
2. verl's standard metrics, by identities that hold for the batch verl logs them for:
   `perf/total_num_tokens` = N × (`prompt_length/mean` + `response_length/mean`) gives the N sequences, so
   `trained` = N × `response_length/mean`; a clipped response is `response_length/max` long, so
   `truncated` = `response_length/clip_ratio` × N × `response_length/max` (when the ratio is above 0);
3. the step's agent-loop trajectories (`tokens_out`): `generated` is their sum, `truncated` and `aborted` those of
   trajectories that ended so.

A category no source answers is None: "not reported by this job".

Invariant: every count is finite and ≥ 0; with `generated` and all four parts known, parts + `unaccounted` =
`generated` (tested).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

TRAINED, FILTERED, STALE, ABORTED, TRUNCATED = "trained", "filtered", "stale", "aborted", "truncated"
GENERATED = "generated"
PARTS = (TRAINED, FILTERED, STALE, ABORTED)  # add up to GENERATED
CATEGORIES = (GENERATED, *PARTS, TRUNCATED)
EXPLICIT_PREFIX = "tokens/"
GROUPS_DRAWN, GROUPS_FILTERED = "groups/drawn", "groups/filtered"
# what the verl identities read
VERL_KEYS = ("perf/total_num_tokens", "prompt_length/mean", "response_length/mean", "response_length/max",
             "response_length/clip_ratio")
ABORTED_STATUSES = frozenset({"error", "failure", "failed", "aborted", "timeout", "capacity_exhausted"})


def wanted_metrics() -> tuple[str, ...]:
    """Every metric name (as the job logs it) the token ledger reads."""
    return tuple(EXPLICIT_PREFIX + c for c in CATEGORIES) + VERL_KEYS + (GROUPS_DRAWN, GROUPS_FILTERED)


def _count(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) and v >= 0 else None


def from_verl(m: Mapping[str, float]) -> dict[str, float]:
    """`trained` and `truncated` from verl's standard metrics by the identities in the module docstring (only those
    whose inputs are all reported and sane)."""
    total, p, r = (_count(m.get(k)) for k in VERL_KEYS[:3])
    if total is None or p is None or r is None or p + r <= 0:
        return {}
    n = total / (p + r)
    out = {TRAINED: n * r}
    clip, longest = _count(m.get("response_length/clip_ratio")), _count(m.get("response_length/max"))
    if clip is not None and clip <= 1 and longest is not None:
        out[TRUNCATED] = min(clip * n * longest, out[TRAINED])
    return out


def from_trajectories(rows: Sequence[tuple[str | None, float | None]]) -> dict[str, float]:
    """`generated`, `truncated` and `aborted` from a step's trajectories, (status, tokens out) each; nothing when
    none reports its tokens."""
    known = [(s, float(t)) for s, t in rows if t is not None and _count(t) is not None]
    if not known:
        return {}
    return {GENERATED: sum(t for _, t in known), TRUNCATED: sum(t for s, t in known if s == "truncated"),
            ABORTED: sum(t for s, t in known if s in ABORTED_STATUSES)}


def step_tokens(metrics: Mapping[str, float], trajectories: Sequence[tuple[str | None, float | None]] = ()
                ) -> dict[str, Any]:
    """{category: tokens or None, unaccounted, sources: {category: where it came from}, groups: {drawn, filtered}
    or None} for one step."""
    counts: dict[str, float | None] = {c: None for c in CATEGORIES}
    sources: dict[str, str] = {}
    for c in CATEGORIES:
        v = _count(metrics.get(EXPLICIT_PREFIX + c))
        if v is not None:
            counts[c], sources[c] = v, EXPLICIT_PREFIX + c
    for label, found in (("verl metrics", from_verl(metrics)), ("trajectories", from_trajectories(trajectories))):
        for c, v in found.items():
            if counts[c] is None:
                counts[c], sources[c] = v, label
    parts = [counts[c] for c in PARTS]
    generated = counts[GENERATED]
    known = [v for v in parts if v is not None]
    unaccounted = max(0.0, generated - sum(known)) if generated is not None and len(known) == len(parts) else None
    drawn, dropped = _count(metrics.get(GROUPS_DRAWN)), _count(metrics.get(GROUPS_FILTERED))
    groups = {"drawn": drawn, "filtered": dropped} if drawn is not None and dropped is not None else None
    return {**counts, "unaccounted": unaccounted, "sources": sources, "groups": groups}


def add(total: dict[str, float | None], step: Mapping[str, Any]) -> None:
    """Sum a step's counts into `total` (a category stays None while no step reported it)."""
    for c in (*CATEGORIES, "unaccounted"):
        v = step.get(c)
        if isinstance(v, (int, float)):
            total[c] = (total.get(c) or 0.0) + float(v)
        else:
            total.setdefault(c, None)


def sentence(total: Mapping[str, float | None]) -> str:
    """What became of the window's generated tokens, in one sentence; says what the job did not report."""
    trained, generated = total.get(TRAINED), total.get(GENERATED)
    if trained is None and generated is None:
        return "Tokens: not reported by this job (log tokens/generated, tokens/trained, … or verl's perf/ metrics)."
    base = generated if generated else None
    said = []
    for c in PARTS + (TRUNCATED,):
        v = total.get(c)
        if v is None:
            continue
        share = f" ({100 * v / base:.1f} %)" if base else ""
        said.append(f"{c} {v:,.0f}{share}")
    missing = [c for c in (GENERATED,) + PARTS if total.get(c) is None]
    head = f"Tokens: {generated:,.0f} generated; " if generated is not None else "Tokens: "
    tail = f"; not reported by this job: {', '.join(missing)}" if missing else ""
    return head + ", ".join(said) + tail + "."

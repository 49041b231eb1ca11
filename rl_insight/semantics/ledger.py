"""The RL goodput ledger: every lane-second of a step accounted to exactly one reason (docs/ledger.md). Pure functions:
state spans in, seconds out.

A step window [a, b) is cut, lane by lane, into pieces at every start and end of any state of the step. In each piece
a lane is either *working* — the reason of the state it holds (`reason_of`: generating, scoring, log-prob recompute,
training, weight sync, tool calls, data, checkpoint, validation, other work) — or *waiting*, and then the reason is
what the other lanes do meanwhile (`waiting_reason`): a rollout lane waits for the long-tail replica while other
replicas still generate, for training while the trainer works, for weight sync, for an agent loop's tool calls; a
trainer lane waits for rollout while every replica of the step generates or tools run (in an asynchronous schedule:
buffer starvation), and for the long-tail replica once some of them are done and others still generate; anything else
is plain idle. A lane holding two states at
once counts once, under the first reason in `WORK_ORDER` (the overlap that makes async worthwhile is not counted
twice: each lane's pieces are disjoint).

Invariant (tested with hypothesis): for every lane, its reasons add up to the window's length exactly, so the step's
reasons add up to wall time × lanes, and none is negative.
"""

from __future__ import annotations

from typing import Any, Iterable

from .insights import NS, phase, states

GENERATING, SCORING, LOGPROB, TRAINING = "generating", "scoring", "log-prob recompute", "training"
WEIGHT_SYNC, DATA, CHECKPOINT, VALIDATION, OTHER = "weight sync", "data", "checkpoint", "validation", "other work"
TOOLS = "tool calls"  # an agent loop's tools (environment, code, search), on the lanes that run them
WAIT_TAIL, WAIT_TRAINING = "waiting: long-tail replica", "waiting: training"
WAIT_ROLLOUT, WAIT_SYNC, WAIT_TOOLS, IDLE = "waiting: rollout", "waiting: weight sync", "waiting: tool calls", "idle"
# a lane in two states at once counts under the first of these (a weight sync inside generation is the sync)
WORK_ORDER = (WEIGHT_SYNC, CHECKPOINT, VALIDATION, TRAINING, LOGPROB, SCORING, GENERATING, TOOLS, DATA, OTHER)
WAITS = (WAIT_TAIL, WAIT_TRAINING, WAIT_ROLLOUT, WAIT_SYNC, WAIT_TOOLS, IDLE)
REASONS = WORK_ORDER + WAITS
USEFUL = TRAINING  # goodput: training device-seconds over all of them

_BY_WORD = (  # (word in the state name, reason), the first that matches
    ("checkpoint", CHECKPOINT), ("save_", CHECKPOINT), ("valid", VALIDATION), ("testing", VALIDATION),
    ("tool", TOOLS),
    ("reward", SCORING), ("score", SCORING), ("log_prob", LOGPROB), ("logprob", LOGPROB), ("ref_", LOGPROB),
    ("transfer_queue", DATA), ("tq_", DATA), ("dataloader", DATA), ("data_", DATA),
    ("train", TRAINING), ("update_actor", TRAINING), ("update_critic", TRAINING), ("actor_update", TRAINING),
    ("backward", TRAINING), ("optimizer", TRAINING),
)


def reason_of(name: str, lane: str) -> str:
    """The work reason of a state on a lane."""
    ph = phase(name, lane)
    if ph == "generation":
        return GENERATING
    if ph == "weight_sync":
        return WEIGHT_SYNC
    low = name.lower()
    for word, reason in _BY_WORD:
        if word in low:
            return reason
    return TRAINING if ph == "training" else OTHER


def is_trainer(lane: str) -> bool:
    return lane.startswith("rank") or "/rank" in lane


def waiting_reason(kind: str, others: set[str], tail: bool = False) -> str:
    """Why a lane with nothing to do waits, from the reasons the other lanes work under meanwhile. `kind`: "trainer",
    "rollout" (a lane that generates in the step) or "other" (reward, tool or data workers); `tail`: some replicas of
    the step are done while others still generate."""
    if WEIGHT_SYNC in others:
        return WAIT_SYNC
    if kind != "rollout" and GENERATING in others:
        return WAIT_TAIL if tail else WAIT_ROLLOUT
    if kind == "trainer":
        return WAIT_ROLLOUT if TOOLS in others else IDLE  # (an agent loop's rollout is its turns and its tools)
    if GENERATING in others and not others & {TRAINING, LOGPROB}:
        return WAIT_TAIL  # the others still generate: this replica finished early
    if others & {TRAINING, LOGPROB, SCORING}:
        return WAIT_TRAINING
    return WAIT_TOOLS if TOOLS in others else IDLE


def step_ledger(spans: Iterable[dict[str, Any]], a: int, b: int, now_ns: int,
                lanes: Iterable[str] | None = None) -> dict[str, dict[str, float]]:
    """{lane: {reason: seconds}} over [a, b) for the lanes with a state in the window (and `lanes`, which may have
    none: all waiting). Each lane's seconds add up to (b - a)."""
    pieces: dict[str, list[tuple[int, int, str]]] = {}
    cuts = {a, b}
    for s in states(spans):
        end = s["end_ns"] if s.get("end_ns") is not None else now_ns
        lo, hi = max(s["start_ns"], a), min(end, b)
        if hi <= lo:
            continue
        pieces.setdefault(s["lane"], []).append((lo, hi, reason_of(s["name"], s["lane"])))
        cuts.update((lo, hi))
    for lane in lanes or ():
        pieces.setdefault(lane, [])
    edges = sorted(cuts)
    # what each lane works on in each elementary piece [edges[i], edges[i + 1])
    work: dict[str, list[str | None]] = {}
    index = {t: i for i, t in enumerate(edges)}
    rank = {r: i for i, r in enumerate(WORK_ORDER)}
    for lane, items in pieces.items():
        row: list[str | None] = [None] * (len(edges) - 1)
        for lo, hi, reason in items:
            for i in range(index[lo], index[hi]):
                held = row[i]
                if held is None or rank[reason] < rank[held]:
                    row[i] = reason
        work[lane] = row
    generating = {lane for lane in work if any(r == GENERATING for _, _, r in pieces[lane])}
    kind = {lane: "trainer" if is_trainer(lane) else "rollout" if lane in generating else "other" for lane in work}
    rollout = [work[lane] for lane in generating]
    out: dict[str, dict[str, float]] = {lane: {} for lane in work}
    for i in range(len(edges) - 1):
        sec = (edges[i + 1] - edges[i]) / NS
        if sec <= 0:
            continue
        busy: set[str] = {r for row in work.values() if (r := row[i]) is not None}  # (no waiting lane among them)
        tail = GENERATING in busy and any(row[i] is None for row in rollout)  # some replicas done, others not
        waits = {k: waiting_reason(k, busy, tail) for k in ("trainer", "rollout", "other")}
        for lane, row in work.items():
            reason = row[i] or waits[kind[lane]]
            got = out[lane]
            got[reason] = got.get(reason, 0.0) + sec
    return out


def totals(per_lane: dict[str, dict[str, float]], devices: dict[str, float] | None = None) -> dict[str, float]:
    """Device-seconds by reason: each lane's seconds times its devices (`devices`, default 1 per lane)."""
    out: dict[str, float] = {}
    for lane, reasons in per_lane.items():
        w = (devices or {}).get(lane, 1.0)
        for reason, sec in reasons.items():
            out[reason] = out.get(reason, 0.0) + sec * w
    return out


def sentence(reasons: dict[str, float]) -> str:
    """Where the time that did not train went, in one sentence (its largest parts first)."""
    total = sum(reasons.values())
    if total <= 0:
        return "No device time in this window."
    useful = reasons.get(USEFUL, 0.0)
    rest = sorted(((r, s) for r, s in reasons.items() if r != USEFUL and s > 0), key=lambda x: (-x[1], x[0]))
    parts = ", ".join(f"{r} {100 * s / total:.0f} %" for r, s in rest[:3])
    return (f"{100 * useful / total:.0f} % of the device time trained the model"
            + (f"; the rest went to {parts}." if parts else "."))

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

A state its process never finished (cut short: the process went silent or exited with it open) is *lost: crash or
restart*, and so is its lane until its next state begins; lanes with nothing to do while only that happens are lost
too (the job stands still).

Invariant (tested with hypothesis): for every lane, its reasons add up to the window's length exactly, so the step's
reasons add up to wall time × lanes, and none is negative.
"""

from __future__ import annotations

from bisect import bisect_right
from functools import lru_cache
from typing import Any, Iterable

from .insights import NS, phase

GENERATING, SCORING, LOGPROB, TRAINING = "generating", "scoring", "log-prob recompute", "training"
WEIGHT_SYNC, DATA, CHECKPOINT, VALIDATION, OTHER = "weight sync", "data", "checkpoint", "validation", "other work"
TOOLS = "tool calls"  # an agent loop's tools (environment, code, search), on the lanes that run them
PROFILING = "profiling overhead"  # the client's own profiler start / stop on the training thread
LOST = "lost: crash or restart"  # a state its process never finished (cut short), and its lane until it works again
WAIT_TAIL, WAIT_TRAINING = "waiting: long-tail replica", "waiting: training"
WAIT_ROLLOUT, WAIT_SYNC, WAIT_TOOLS, IDLE = "waiting: rollout", "waiting: weight sync", "waiting: tool calls", "idle"
# a lane in two states at once counts under the first of these (a weight sync inside generation is the sync)
WORK_ORDER = (LOST, PROFILING, WEIGHT_SYNC, CHECKPOINT, VALIDATION, TRAINING, LOGPROB, SCORING, GENERATING, TOOLS,
              DATA, OTHER)
WAITS = (WAIT_TAIL, WAIT_TRAINING, WAIT_ROLLOUT, WAIT_SYNC, WAIT_TOOLS, IDLE)
REASONS = WORK_ORDER + WAITS
USEFUL = TRAINING  # goodput: training device-seconds over all of them

_BY_WORD = (  # (word in the state name, reason), the first that matches
    ("rl_insight.profiler", PROFILING), ("checkpoint", CHECKPOINT), ("save_", CHECKPOINT), ("valid", VALIDATION),
    ("testing", VALIDATION), ("tool", TOOLS),
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
    if LOST in others and not others & {GENERATING, TRAINING, LOGPROB, SCORING, TOOLS}:
        return LOST  # the job stands still while a process of it restarts
    if kind != "rollout" and GENERATING in others:
        return WAIT_TAIL if tail else WAIT_ROLLOUT
    if kind == "trainer":
        return WAIT_ROLLOUT if TOOLS in others else IDLE  # (an agent loop's rollout is its turns and its tools)
    if GENERATING in others and not others & {TRAINING, LOGPROB}:
        return WAIT_TAIL  # the others still generate: this replica finished early
    if others & {TRAINING, LOGPROB, SCORING}:
        return WAIT_TRAINING
    return WAIT_TOOLS if TOOLS in others else IDLE


@lru_cache(maxsize=16384)
def _reason(name: str, lane: str) -> str:
    return reason_of(name, lane)


_RANK = {r: i for i, r in enumerate(WORK_ORDER)}


def _resolved(items: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """A lane's states as disjoint pieces in time order, each under the first reason in WORK_ORDER held there."""
    if len(items) < 2:
        return items
    items.sort()
    out = [items[0]]
    for item in items[1:]:
        lo, hi, r = item
        plo, phi, pr = out[-1]
        if lo >= phi:
            out.append(item)  # (the usual lane: one state after another)
        elif not (hi <= phi and _RANK[pr] <= _RANK[r]):  # (a nested state the outer one outranks adds nothing)
            return _resolved_by_cuts(items)
    return out


def _restarting(pieces: list[tuple[int, int, str]], b: int) -> list[tuple[int, int, str]]:
    """A lane whose state was cut short (its process died) is lost until its next state begins (the restart), or to
    the window's end."""
    if not any(r == LOST for _, _, r in pieces):
        return pieces
    out = list(pieces)
    for i, (lo, hi, r) in enumerate(out):
        if r == LOST:
            out[i] = (lo, out[i + 1][0] if i + 1 < len(out) else b, r)
    return [p for p in out if p[1] > p[0]]


def _resolved_by_cuts(items: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """_resolved for states that overlap without nesting, piece by piece between their edges."""
    cuts = sorted({t for lo, hi, _ in items for t in (lo, hi)})
    out: list[tuple[int, int, str]] = []
    for x, y in zip(cuts, cuts[1:]):
        held = [r for lo, hi, r in items if lo <= x and y <= hi]
        if not held:
            continue
        r = min(held, key=_RANK.__getitem__)
        if out and out[-1][1] == x and out[-1][2] == r:
            out[-1] = (out[-1][0], y, r)
        else:
            out.append((x, y, r))
    return out


def _segments(resolved: dict[str, list[tuple[int, int, str]]], rollout: set[str], a: int, b: int
              ) -> list[tuple[int, int, frozenset[str], bool]]:
    """[a, b) cut where what the lanes work on changes: (start, end, the reasons some lane works under, whether some
    replica of the step is done while others still generate)."""
    events: list[tuple[int, int, str, bool]] = []
    add = events.append
    for lane, pieces in resolved.items():
        is_rollout = lane in rollout
        for lo, hi, r in pieces:
            add((lo, 1, r, is_rollout))
            add((hi, -1, r, is_rollout))
    events.sort()
    count: dict[str, int] = {}
    working_rollout, total_rollout = 0, len(rollout)
    out: list[tuple[int, int, frozenset[str], bool]] = []
    busy: frozenset[str] = frozenset()
    t, i, n = a, 0, len(events)
    while t < b:
        changed = not out
        while i < n and events[i][0] <= t:
            _, d, r, is_rollout = events[i]
            c = count.get(r, 0)
            count[r] = c + d
            changed = changed or (c == 0) != (c + d == 0)  # a reason starts or stops being worked on by anyone
            if is_rollout:
                working_rollout += d
            i += 1
        nxt = events[i][0] if i < n else b
        if changed:
            busy = frozenset(r for r, k in count.items() if k > 0)
        now_tail = GENERATING in busy and working_rollout < total_rollout
        if out and out[-1][2] == busy and out[-1][3] == now_tail:
            out[-1] = (out[-1][0], nxt, busy, now_tail)
        else:
            out.append((t, nxt, busy, now_tail))
        t = nxt
    return out


def lost_at(before: Iterable[dict[str, Any]], a: int) -> set[str]:
    """Lanes still down at `a`: their last state that ended by then was cut short (`before`: states ending before
    the window, e.g. the previous step's length back)."""
    before = list(before)
    cut = {s["lane"] for s in before if (s.get("attributes") or {}).get("cut_short")}
    if not cut:
        return set()  # (the usual step: one look at each span)
    last: dict[str, tuple[int, bool]] = {}
    for s in before:
        end = s.get("end_ns")
        if s["lane"] not in cut or s.get("kind", "state") != "state" or end is None or end > a:
            continue
        seen = last.get(s["lane"])
        if seen is None or end >= seen[0]:
            last[s["lane"]] = (end, bool((s.get("attributes") or {}).get("cut_short")))
    return {lane for lane, (_, was_cut) in last.items() if was_cut}


def step_ledger(spans: Iterable[dict[str, Any]], a: int, b: int, now_ns: int,
                lanes: Iterable[str] | None = None, down: Iterable[str] = ()) -> dict[str, dict[str, float]]:
    """{lane: {reason: seconds}} over [a, b) for the lanes with a state in the window (and `lanes`, which may have
    none: all waiting). `down`: lanes whose process died before the window (`lost_at`): lost until their first
    state in it. Each lane's seconds add up to (b - a).

    A sweep: each lane's states resolved into disjoint pieces, the window cut where what the lanes work on changes
    (a few segments a step), and each lane's gaps classified by the segments they cross."""
    items: dict[str, list[tuple[int, int, str]]] = {}
    rollout: set[str] = set()
    for s in spans:
        if s.get("kind", "state") != "state":
            continue
        end = s["end_ns"]
        if end is None:
            end = now_ns
        lo = s["start_ns"]
        lo, hi = (lo if lo > a else a), (end if end < b else b)
        if hi > lo:
            lane = s["lane"]
            its = items.get(lane)
            if its is None:
                its = items[lane] = []
            r = LOST if (s.get("attributes") or {}).get("cut_short") else _reason(s["name"], lane)
            its.append((lo, hi, r))
            if r == GENERATING:
                rollout.add(lane)
    for lane in lanes or ():
        items.setdefault(lane, [])
    for lane in down:
        items.setdefault(lane, [])
    resolved = {lane: _resolved(its) for lane, its in items.items()}
    for lane in down:  # lost from the window's start, unless a state is under way there (it came back)
        its = resolved[lane]
        if not its or its[0][0] > a:
            resolved[lane] = [(a, a, LOST), *its]
    resolved = {lane: _restarting(its, b) for lane, its in resolved.items()}
    segments = _segments(resolved, rollout, a, b)
    starts = [seg[0] for seg in segments]
    waits: dict[tuple[int, str], str] = {}
    out: dict[str, dict[str, float]] = {}
    for lane, pieces in resolved.items():
        kind = "trainer" if is_trainer(lane) else "rollout" if lane in rollout else "other"
        ns: dict[str, int] = {}  # (integer nanoseconds while summing: exact, and cheaper than floats)
        gaps, t = [], a
        for lo, hi, r in pieces:
            ns[r] = ns.get(r, 0) + hi - lo
            if lo > t:
                gaps.append((t, lo))
            t = hi
        if t < b:
            gaps.append((t, b))
        for lo, hi in gaps:
            j = bisect_right(starts, lo) - 1 if len(segments) > 1 else 0
            while j < len(segments) and segments[j][0] < hi:
                s0, s1, busy, tail = segments[j]
                x, y = (lo if lo > s0 else s0), (hi if hi < s1 else s1)
                if y > x:
                    why = waits.get((j, kind))
                    if why is None:
                        why = waits[(j, kind)] = waiting_reason(kind, set(busy), tail)
                    ns[why] = ns.get(why, 0) + y - x
                j += 1
        out[lane] = {r: v / NS for r, v in ns.items()}
    return out


def totals(per_lane: dict[str, dict[str, float]], devices: dict[str, float] | None = None) -> dict[str, float]:
    """Device-seconds by reason: each lane's seconds times its devices (`devices`, default 1 per lane)."""
    out: dict[str, float] = {}
    for lane, reasons in per_lane.items():
        w = (devices or {}).get(lane, 1.0)
        for reason, sec in reasons.items():
            out[reason] = out.get(reason, 0.0) + sec * w
    return out


WAITS_SPOKEN = {WAIT_TAIL: "for the long-tail replica", WAIT_TRAINING: "for training", WAIT_ROLLOUT: "for rollout",
                WAIT_SYNC: "for the weight sync", WAIT_TOOLS: "for tool calls", IDLE: "idle"}  # after "Waiting:"
USEFUL_WORDS = "training"  # how the useful reason is said everywhere: the sentence, the waterfall, the CLI


def spoken(reason: str) -> str:
    """A reason in a sentence: `waiting for the long-tail replica` (the key reads `waiting: long-tail replica`)."""
    if reason == USEFUL:
        return USEFUL_WORDS
    return f"waiting {WAITS_SPOKEN[reason]}" if reason in WAITS and reason != IDLE else reason


def sentence(reasons: dict[str, float]) -> str:
    """Where the device time went, in the words every view uses: the share that trained, then the other work and the
    waiting apart (each its largest parts first), so that generating never reads as a kind of waiting."""
    total = sum(reasons.values())
    if total <= 0:
        return "No device time in this window."
    useful = reasons.get(USEFUL, 0.0)
    rest = sorted(((r, s) for r, s in reasons.items() if r != USEFUL and s > 0), key=lambda x: (-x[1], x[0]))

    def pct(s: float) -> str:
        return f"{100 * s / total:.0f} %"

    work = [f"{r} {pct(s)}" for r, s in rest if r in WORK_ORDER and r != LOST][:2]
    waits = [f"{WAITS_SPOKEN[r]} {pct(s)}" for r, s in rest if r in WAITS][:2]
    lost = reasons.get(LOST, 0.0)
    out = f"{pct(useful)} of the device time went to {USEFUL_WORDS}."
    out += f" Other work: {', '.join(work)}." if work else ""
    out += f" Waiting: {', '.join(waits)}." if waits else ""
    out += f" Lost to a crash or restart: {pct(lost)}." if lost > 0 else ""
    return out

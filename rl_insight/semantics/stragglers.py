"""The fail-slow radar's rule: which lane makes every step slower, by how much and why — pure functions, a step's
states in, culprits out (the same for the server, from its run store, and for the bench, from synthetic lanes).

Definitions (docs/findings.md states them for users):

* *Peers* are lanes that should take the same time in a step: the lanes of one class (`rank_*`, `replica_*`,
  `reward_*`, … : the name without its number, `lane_class`). A class of fewer than `MIN_PEERS` lanes has no
  straggler.
* A lane's states in the step are split by *cause class* (`cause_of`): compute, communication, input, host CPU
  (also the time between its first and last state that no state covers), rollout generation, weight sync,
  TransferQueue.
* *Waiting for a late peer is not the waiter's own work.* The k-th collective state of each peer is one collective
  (SPMD order); a peer's wait in it is the last peer's arrival minus its own (at most its communication), and only
  the rest counts as its communication.
* A lane's *share* in a cause is its seconds in that cause minus the peers' median for it, over the peers' median
  own time; the *spread* of shares is 1.4826 × their median absolute deviation, at least `FLOOR`.
* A class's *candidate* over its last `WINDOW` clean steps (`candidate`): per cause, the lane of largest mean share,
  when that mean is at least `MIN_EXCESS` and `Z` spreads (of the lanes' means) over the median, and in `CONFIRM`
  of the steps alone (the latest among them) its share was `MIN_EXCESS` and `Z_STEP` of that step's spreads; the
  cause where it stands out most; failing every cause, the same on the whole own time, cause `unknown`. (One slow
  step is no straggler; a 10 % slower rank among 4,096 is found within three clean steps.)
* A step is *clean* (`clean`) unless it holds a checkpoint, validation, evaluation or profiling state on any lane;
  the run's first `WARMUP_STEPS` are not looked at. Only clean steps enter a window.
* The radar (`Radar`) opens a finding at a class's first candidate; it grows while the same lane stays the
  candidate or stands out in the step alone, and ends after `CLEAR` clean steps with neither; *chronic* once named
  in `CHRONIC` clean steps, a *one-off* when it ended before.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from .insights import GENERATION_NAMES, NS, WEIGHT_SYNC_NAMES, union

MIN_PEERS = 3
FLOOR = 0.005  # the spread is at least 0.5 % of the peers' median own time
MIN_EXCESS = 0.04  # a candidate's own time is at least 4 % over its peers' median ...
Z = 6.0  # ... and at least 6 spreads over it (over the window's mean) ...
Z_STEP = 5.0  # ... and in CONFIRM of the window's steps alone, 5 of that step's spreads
WARMUP_STEPS = 2
WINDOW, CONFIRM, CLEAR, CHRONIC = 3, 2, 3, 5

_COLLECTIVE = re.compile(r"(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|barrier|nccl|gloo|hccl|"
                         r"send|recv|collective)", re.I)
_INPUT = re.compile(r"(data|load|fetch|get_batch|next_batch|input|prefetch|collate|tokeni[sz]e)", re.I)  # (not verl's
# train_batch: that is compute)
_TQ = re.compile(r"(transfer_?queue|^tq[_:]|_tq$)", re.I)
_HOST = re.compile(r"(host|cpu|preprocess|postprocess)", re.I)
_UNCLEAN = re.compile(r"(checkpoint|save_model|validat|evaluat|^eval|profil|testing)", re.I)
_NUMBERED = re.compile(r"^(.+?)[_-]?\d+$")


def lane_class(lane: str) -> str:
    """`rank_12` → `rank`, `replica_3` → `replica`, `actor/rank3` → `actor/rank`; a lane with no number is its own
    class."""
    m = _NUMBERED.match(lane)
    return m.group(1) if m else lane


def cause_of(name: str, lane: str) -> str:
    """A state's cause class from its name (and its lane's class for generation)."""
    if name.endswith("_generate") or name in GENERATION_NAMES:
        return "rollout_generation"
    if name in WEIGHT_SYNC_NAMES or "weight" in name.lower() and "sync" in name.lower():
        return "weight_sync"
    if _TQ.search(name):
        return "transfer_queue"
    if _COLLECTIVE.search(name):
        return "communication"
    if _INPUT.search(name):
        return "input"
    if _HOST.search(name):
        return "host_cpu"
    return "compute"


def clean(states: Iterable[dict[str, Any]]) -> bool:
    """Whether a step may name a straggler: no checkpoint, validation or profiling state in it."""
    return not any(_UNCLEAN.search(s.get("name") or "") for s in states)


@dataclass
class LaneTime:
    """One lane's step: its own seconds by cause class and the seconds it waited for late peers."""

    lane: str
    own: dict[str, float] = field(default_factory=dict)
    wait_s: float = 0.0

    @property
    def own_s(self) -> float:
        return sum(self.own.values())


def lane_times(states: Sequence[dict[str, Any]], a: int, b: int) -> dict[str, LaneTime]:
    """Each lane's own time by cause in the window [a, b) (top-level states clipped to it), waits for late peers in
    collectives discounted (the module's definitions)."""
    by_lane: dict[str, list[tuple[int, int, str]]] = {}
    for s in states:
        if s.get("kind", "state") != "state" or s.get("parent_id"):
            continue
        lo, hi = max(int(s["start_ns"]), a), min(int(s["end_ns"] if s.get("end_ns") is not None else b), b)
        if hi > lo:
            by_lane.setdefault(s["lane"], []).append((lo, hi, s["name"]))
    out: dict[str, LaneTime] = {}
    collectives: dict[str, list[tuple[str, int, int]]] = {}  # class -> [(lane, k, start)]
    for lane, items in by_lane.items():
        items.sort()
        t = out[lane] = LaneTime(lane)
        k = 0
        for lo, hi, name in items:
            cause = cause_of(name, lane)
            t.own[cause] = t.own.get(cause, 0.0) + (hi - lo) / NS
            if cause == "communication":
                collectives.setdefault(lane_class(lane), []).append((lane, k, lo))
                k += 1
        covered = sum(hi - lo for lo, hi in union((lo, hi) for lo, hi, _ in items))
        gaps = (items[-1][1] - items[0][0] - covered) / NS if items else 0.0
        if gaps > 0:
            t.own["host_cpu"] = t.own.get("host_cpu", 0.0) + gaps
    for arrivals in collectives.values():
        last: dict[int, int] = {}
        for _, k, start in arrivals:
            last[k] = max(last.get(k, start), start)
        for lane, k, start in arrivals:
            wait = (last[k] - start) / NS
            t = out[lane]
            taken = min(wait, t.own.get("communication", 0.0))
            t.own["communication"] = t.own.get("communication", 0.0) - taken
            t.wait_s += taken
    return out


@dataclass
class StepView:
    """One clean step of one class of lanes: each lane's own seconds by cause, and the peers' medians."""

    step: int
    own: dict[str, dict[str, float]]  # lane -> cause -> seconds
    total: dict[str, float]  # lane -> own seconds
    median: float
    cause_median: dict[str, float]

    spread: dict[str | None, float] = field(default_factory=dict)  # cause (None: the own time) -> its spread

    @classmethod
    def of(cls, step: int, peers: list[LaneTime]) -> StepView:
        causes = {c for p in peers for c in p.own}
        v = cls(step, {p.lane: p.own for p in peers}, {p.lane: p.own_s for p in peers},
                statistics.median(p.own_s for p in peers),
                {c: statistics.median(p.own.get(c, 0.0) for p in peers) for c in causes})
        for cause in [*causes, None]:
            v.spread[cause] = _spread([_share(v, lane, cause) for lane in v.total])
        return v


@dataclass(frozen=True)
class Candidate:
    """A class's straggler over the last clean steps."""

    lane: str
    cause: str
    excess_s: float  # mean own seconds over the peers' median
    share: float  # that as a share of the median
    z: float  # in spreads
    median_s: float  # the peers' median own time
    named_in: int  # of the window's steps, those where this lane alone was MIN_EXCESS over the median


def candidate(window: Sequence[StepView]) -> Candidate | None:
    """The class's straggler over `window` (its last clean steps, oldest first), or None (the module's rule): per
    cause, each lane's excess in that cause over the peers' median for it, as a share of the peers' median own time,
    averaged over the window; the lane and cause that stand out most (in spreads) when they pass every bar; else the
    same on the whole own time, cause unknown."""
    latest = window[-1]
    if len(window) < CONFIRM or len(latest.total) < MIN_PEERS or latest.median <= 0:
        return None
    found = [c for c in (_standout(window, cause) for cause in sorted({c for v in window for c in v.cause_median}))
             if c is not None]
    return max(found, key=lambda c: c.z) if found else _standout(window, None)


def _share(v: StepView, lane: str, cause: str | None) -> float:
    if lane not in v.total or v.median <= 0:
        return 0.0
    if cause is None:
        return (v.total[lane] - v.median) / v.median
    return (v.own[lane].get(cause, 0.0) - v.cause_median.get(cause, 0.0)) / v.median


def _spread(xs: Sequence[float]) -> float:
    """1.4826 × the median absolute deviation (a standard deviation's robust stand-in), at least FLOOR."""
    centre = statistics.median(xs)
    return max(1.4826 * statistics.median(abs(x - centre) for x in xs), FLOOR)


def _named(v: StepView, lane: str, cause: str | None) -> bool:
    """Whether `lane` stands out in the one step `v`: MIN_EXCESS over the peers and Z_STEP of that step's spreads."""
    share = _share(v, lane, cause)
    return share >= MIN_EXCESS and share >= Z_STEP * v.spread.get(cause, FLOOR)


def _still_slow(v: StepView, lane: str) -> bool:
    """Whether an open finding's lane stands out in the step `v` alone, in any cause or in its whole own time."""
    return any(_named(v, lane, cause) for cause in [*v.cause_median, None])


def _standout(window: Sequence[StepView], cause: str | None) -> Candidate | None:
    latest = window[-1]
    mean = {lane: sum(_share(v, lane, cause) for v in window) / len(window) for lane in latest.total}
    centre = statistics.median(mean.values())
    spread = _spread(list(mean.values()))
    lane = max(mean, key=mean.__getitem__)
    share = mean[lane] - centre
    named_in = sum(1 for v in window if _named(v, lane, cause))
    if share < MIN_EXCESS or share < Z * spread or named_in < CONFIRM or not _named(latest, lane, cause):
        return None
    excess_s = sum(_share(v, lane, cause) * v.median for v in window) / len(window)
    return Candidate(lane, cause or "unknown", excess_s, share, share / spread, latest.median, named_in)


@dataclass
class Finding:
    """One straggler incident, as the findings API shows it (`as_json`)."""

    subject: str
    cause: str
    first_step: int
    last_step: int
    steps: list[int] = field(default_factory=list)  # the clean steps it was named in
    excess: list[float] = field(default_factory=list)
    z: list[float] = field(default_factory=list)
    medians: list[float] = field(default_factory=list)
    causes: dict[str, int] = field(default_factory=dict)
    open: bool = True

    @property
    def chronic(self) -> bool:
        return len(self.steps) >= CHRONIC

    def as_json(self) -> dict[str, Any]:
        excess = statistics.median(self.excess)
        share = excess / statistics.median(self.medians) if self.medians else 0.0
        confidence = min(1.0, len(self.steps) / CHRONIC) * min(1.0, statistics.median(self.z) / (2 * Z))
        pattern = "chronic" if self.chronic else ("ongoing" if self.open else "one-off")
        words = CAUSE_WORDS.get(self.cause, self.cause)
        return {
            "kind": "straggler", "subject": self.subject, "cause": self.cause, "first_step": self.first_step,
            "last_step": self.last_step, "steps": len(self.steps), "excess_s": round(excess, 6),
            "confidence": round(confidence, 3), "open": self.open, "pattern": pattern,
            "evidence": [
                f"named in {len(self.steps)} clean step(s) from {self.first_step} to {self.last_step} ({pattern})",
                f"its own work {excess:.3f} s ({share:.0%}) over its peers' median, "
                f"{statistics.median(self.z):.1f} spreads out",
                "where the excess is: " + ", ".join(f"{c} in {n} step(s)" for c, n in
                                                    sorted(self.causes.items(), key=lambda kv: -kv[1])),
            ],
            "next": NEXT.get(self.cause, NEXT["unknown"]),
            "sentence": f"{self.subject} makes every step about {excess:.2f} s slower: {words} "
                        f"(steps {self.first_step}–{self.last_step}, {pattern}).",
        }


CAUSE_WORDS = {
    "compute": "its own compute takes longer than its peers'",
    "communication": "its part of the collectives takes longer (a slow link or NIC)",
    "input": "it waits longer for its input data",
    "host_cpu": "its host spends longer between kernels (host CPU)",
    "rollout_generation": "its generation takes longer than the other replicas'",
    "weight_sync": "its weight sync takes longer",
    "transfer_queue": "its TransferQueue reads and writes take longer",
    "unknown": "no one kind of work explains it",
}
NEXT = {
    "compute": ["a profile of this lane for the next step", "its GPU's clocks, temperature and throttle reasons",
                "a stack snapshot of its process"],
    "communication": ["its NIC's and links' error counters", "the collectives' per-peer times in a profile"],
    "input": ["its data loader's workers and storage reads", "a stack snapshot of its process"],
    "host_cpu": ["other processes on its host (noisy neighbour)", "its CPU affinity and the host's load"],
    "rollout_generation": ["this replica's engine metrics (running, waiting, KV cache)", "its GPU's clocks"],
    "weight_sync": ["the host's network during the sync", "the sync's per-replica times"],
    "transfer_queue": ["TransferQueue's storage units and their latency"],
    "unknown": ["a profile of this lane for the next step", "a stack snapshot of its process"],
}


class Radar:
    """Candidates across a run's clean steps → findings (the module's definitions). Feed steps in order."""

    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self._windows: dict[str, list[StepView]] = {}  # class -> its last WINDOW clean steps
        self._open: dict[str, Finding] = {}  # class -> its open finding
        self._quiet: dict[str, int] = {}  # class -> clean steps since its open finding's lane was last named
        self._seen = 0

    def step(self, step: int, states: Sequence[dict[str, Any]], a: int, b: int) -> list[Finding]:
        """Take one step; the findings that opened in it."""
        self._seen += 1
        if self._seen <= WARMUP_STEPS or not clean(states):
            return []
        classes: dict[str, list[LaneTime]] = {}
        for t in lane_times(states, a, b).values():
            classes.setdefault(lane_class(t.lane), []).append(t)
        opened = []
        for cls in set(classes) | set(self._open):
            peers = classes.get(cls, [])
            c = None
            if len(peers) >= MIN_PEERS:
                window = self._windows.setdefault(cls, [])
                window.append(StepView.of(step, peers))
                del window[:-WINDOW]
                c = candidate(window)
            current = self._open.get(cls)
            if current is not None:
                recent = self._windows.get(cls)
                if c is not None and c.lane == current.subject:
                    self._add(current, step, c)
                    self._quiet[cls] = 0
                elif len(peers) >= MIN_PEERS and recent and _still_slow(recent[-1], current.subject):
                    current.steps.append(step)  # (slow in this step alone: the incident goes on)
                    current.last_step = step
                    self._quiet[cls] = 0
                else:
                    self._quiet[cls] = self._quiet.get(cls, 0) + 1
                    if self._quiet[cls] >= CLEAR:
                        current.open = False
                        del self._open[cls]
                continue
            if c is None:
                continue
            f = Finding(c.lane, c.cause, step, step)
            self._add(f, step, c)
            self.findings.append(f)
            self._open[cls] = f
            self._quiet[cls] = 0
            opened.append(f)
        return opened

    @staticmethod
    def _add(f: Finding, step: int, c: Candidate) -> None:
        f.steps.append(step)
        f.last_step = step
        f.excess.append(c.excess_s)
        f.z.append(c.z)
        f.medians.append(c.median_s)
        f.causes[c.cause] = f.causes.get(c.cause, 0) + 1
        f.cause = max(f.causes.items(), key=lambda kv: kv[1])[0]

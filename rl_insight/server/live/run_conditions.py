"""What a live run's plain "live" hides: `stalled` and `hung`.

A run whose processes still beat stays live in the run store (intake/pipeline.py hands it their heartbeats), so a hang
is seen by each insight refresh like any other live run. A run is *stalled* when the refresh names a stalled lane (a
state far past its usual length, semantics/insights.stalled) or its step clock has not moved for `step_stall_s`; it is
*hung* once a verdict says so (`hung`: two stack snapshots apart with nobody moved, or the verdict's class). Both end
when the run moves again (the refresh names no stall).

In a fleet (several servers, one store) only the lease holder runs the refreshes and the stall watch; each fleet round
(`share`) it stores its conditions in the store when they changed, and every other server takes the stored ones, so a
run reads the same through any server of the fleet (within a round, ~2 s).

Invariants: only runs the latest refresh saw are stalled or hung (a run no refresh sees any more, finished or gone,
is nothing here); a server that leads (one alone, or the fleet's lease holder) is the only writer of the conditions.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal, Mapping, Protocol

from .step_clock import StepClock

Condition = Literal["stalled", "hung"]


def _secs(s: float) -> str:
    return f"{s:.2g} s" if s < 10 else f"{s:.0f} s"


@dataclass
class Stall:
    """Why a run counts as stalled now, the lanes implicated, since when (unix seconds), and the verdict once hung."""

    reason: str
    lanes: list[str]
    since: float
    hung: str | None = None  # why it is hung (the verdict's words), once it is


class SharedBody(Protocol):
    """One document the servers of a fleet share (fleet/records.SharedDocument)."""

    def pull(self) -> dict[str, Any] | None: ...

    def push(self, body: dict[str, Any]) -> bool: ...


class RunConditions:
    def __init__(self, clock: StepClock, step_stall_s: float) -> None:
        self.clock = clock
        self.step_stall_s = step_stall_s
        self._lock = threading.Lock()
        self._stalls: dict[tuple[str, str], Stall] = {}
        self._seen: set[tuple[str, str]] = set()  # the runs the latest refresh judged
        self._shared: dict[str, Any] | None = None  # what the last `share` stored (the leader writes only changes)

    @staticmethod
    def reason_of(summary: Mapping[str, Any]) -> tuple[str, list[str]] | None:
        """Why a refresh's summary of a run says it is stalled (its first stalled lane, in words), and the lanes."""
        stalled = summary.get("stalled") or []
        if not stalled:
            return None
        s = stalled[0]
        usual = f"usually {_secs(s['usual_p95_s'])} at most" if s.get("usual_p95_s") is not None else "no history yet"
        lanes = [x["lane"] for x in stalled]
        if len(stalled) == 1:
            return f"{s['lane']} has been in {s['state']} for {s['open_s']:.0f} s ({usual})", lanes
        # several: none is named first until a verdict knows the culprit (the longest open is not the one to blame)
        states = sorted({x["state"] for x in stalled})
        held = states[0] if len(states) == 1 else f"{len(states)} states"
        return f"{len(stalled)} lanes stalled in {held}, the longest for {s['open_s']:.0f} s ({usual})", lanes

    def stall_of(self, run: tuple[str, str], summary: Mapping[str, Any], now: float) -> tuple[str, list[str]] | None:
        """Why this run counts as stalled now, and the lanes implicated; None when it does not."""
        why = self.reason_of(summary)
        if why is not None:
            return why
        clock = self.clock.current(*run)
        if self.step_stall_s > 0 and clock is not None and now - clock[1] > self.step_stall_s:
            return f"no step has ended for {now - clock[1]:.0f} s (the last was step {clock[0]})", []
        return None

    def on_insights(self, latest: Mapping[tuple[str, str], Mapping[str, Any]], now: float | None = None) -> None:
        """An insight refresh: the runs it names stalled are; every other run is not (any more)."""
        now = time.time() if now is None else now
        stalls: dict[tuple[str, str], Stall] = {}
        with self._lock:
            for run, summary in latest.items():
                why = self.stall_of(run, summary, now)
                if why is None:
                    continue
                before = self._stalls.get(run)
                stalls[run] = Stall(why[0], why[1], before.since if before else now, before.hung if before else None)
            self._stalls = stalls
            # judged: every open state of the run has a usual length to be within (a state seen for the first time,
            # a hang in the first step, has none: the stacks say more than "within its usual time")
            self._seen = {run for run, summary in latest.items() if not summary.get("unjudged")}

    def lanes_usual(self, run: tuple[str, str]) -> bool | None:
        """True when the latest refresh judged the run and found every lane within its usual time and its steps
        ending; False when it is stalled or hung; None when no refresh judged it (too new — a state without a usual
        length yet —, finished or gone)."""
        with self._lock:
            if run in self._stalls:
                return False
            return True if run in self._seen else None

    def mark_hung(self, run: tuple[str, str], why: str) -> bool:
        """A verdict says the stalled run is hung; False when the run is not stalled (any more): nothing changes."""
        with self._lock:
            stall = self._stalls.get(run)
            if stall is None:
                return False
            stall.hung = why
            return True

    def of(self, run: tuple[str, str]) -> Condition | None:
        with self._lock:
            stall = self._stalls.get(run)
        if stall is None:
            return None
        return "hung" if stall.hung else "stalled"

    def stall(self, run: tuple[str, str]) -> Stall | None:
        with self._lock:
            return self._stalls.get(run)

    def all(self) -> dict[tuple[str, str], Condition]:
        """Every run that is stalled or hung now, and which."""
        with self._lock:
            return {run: "hung" if s.hung else "stalled" for run, s in self._stalls.items()}

    def share(self, doc: SharedBody, leading: bool) -> None:
        """(a fleet round) The leader stores its conditions when they changed since it last did; every other server
        replaces its own with the stored ones. Raises what the store raises (the round counts it and goes on)."""
        if leading:
            with self._lock:
                body = {"runs": [{"project": p, "experiment_name": e, **asdict(s)}
                                 for (p, e), s in sorted(self._stalls.items())],
                        "seen": [list(run) for run in sorted(self._seen)]}
            if body == self._shared:
                return
            if not doc.push(body):  # stored by the server that led before: read its version, then store over it
                doc.pull()
                if not doc.push(body):
                    return  # another round tries again
            self._shared = body
            return
        self._shared = None  # (leading later: store at once)
        stored = doc.pull()
        if stored is None:
            return
        stalls: dict[tuple[str, str], Stall] = {}
        for r in stored.get("runs") or []:
            try:
                stalls[(str(r["project"]), str(r["experiment_name"]))] = Stall(
                    str(r["reason"]), [str(x) for x in r.get("lanes") or []], float(r["since"]),
                    None if r.get("hung") is None else str(r["hung"]))
            except (KeyError, TypeError, ValueError):
                continue  # (written by this module: only a newer or older version could differ)
        seen = {(str(r[0]), str(r[1])) for r in stored.get("seen") or [] if isinstance(r, list) and len(r) == 2}
        with self._lock:
            self._stalls = stalls
            self._seen = seen | set(stalls)

"""Automatic stack snapshots: when a run stalls, the server asks for its stacks by itself, before anyone looks.

A run is stalled as live/run_conditions.py says (a lane in a state far beyond its usual duration, insights.stalled,
or no step for `step_stall_s`). Each refresh of the insight service (`on_insights`) checks the live runs, those whose
processes only beat included. A stall episode takes two snapshots `confirm_after_s` apart: the second says who moved
(stacks/groups.moved) — nobody: stuck, and the run is marked hung; somebody: slow. With `auto_profile`, a slow stall
arms a torch profile of the next step on the stalled lanes (profiles on request, rooms/profiles/book.py). At most
one episode per run per `interval_s`; the snapshots are kept with the run (retention applies) and shown on its
stalled-lane card.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ....errors import RLInsightError
from ....protocol import CLIENT_HEARTBEAT_S
from ...live.run_conditions import RunConditions
from ...live.step_clock import StepClock
from ..profiles.book import ProfileBook
from .book import StackBook
from .records import StackSnapshot
from .verdict import HANG_CLASSES

log = logging.getLogger("rl_insight.server.rooms.stacks.stall_watch")

CONFIRM_AFTER_S = 30.0


class StallWatch:
    def __init__(self, stacks: StackBook, clock: StepClock, conditions: RunConditions, *, interval_s: float,
                 profiles: ProfileBook | None = None, auto_profile: bool = False,
                 confirm_after_s: float = CONFIRM_AFTER_S) -> None:
        self.stacks = stacks
        self.clock = clock
        self.conditions = conditions
        self.interval_s = interval_s
        self.profiles = profiles if auto_profile else None
        self.confirm_after_s = confirm_after_s
        self._lock = threading.Lock()
        # run -> the episode: when it began, its reason, its stalled lanes, its snapshots' ids
        self._episodes: dict[tuple[str, str], dict[str, Any]] = {}
        self.taken = 0
        self.profiled = 0
        stacks.on_complete.append(self._completed)

    def on_insights(self, latest: dict[tuple[str, str], dict[str, Any]], now: float | None = None) -> int:
        """An insight refresh: take a first or confirming snapshot for each stalled run due one. Returns how many."""
        now = time.time() if now is None else now
        started = 0
        for run, summary in latest.items():
            why = self.conditions.stall_of(run, summary, now)
            with self._lock:
                ep = self._episodes.get(run)
            if why is None:
                continue
            if ep is None or now - ep["began"] >= self.interval_s:
                ep = {"began": now, "reason": why[0], "lanes": why[1], "snapshots": []}
                kind = "stall"
            elif len(ep["snapshots"]) == 1 and now - ep["began"] >= self.confirm_after_s:
                kind = "stall, again: who moved"
            else:
                continue
            try:
                snap = self.stacks.create(*run, origin="auto", reason=f"{kind}: {why[0]}")
            except RLInsightError as exc:  # no live process (it died: the silence handling says so), too many pending
                log.info("no automatic stack snapshot of %s/%s: %s", *run, exc)
                continue
            ep["snapshots"].append(snap["id"])
            with self._lock:
                self._episodes[run] = ep
            started += 1
            self.taken += 1
            log.warning("run %s/%s stalled (%s): stack snapshot %s", *run, why[0], snap["id"])
        return started

    def _completed(self, snap: StackSnapshot) -> None:
        """A snapshot completed: a stalled run is hung when its verdict says so (any snapshot's) or when it confirms
        a stall where nobody moved; when somebody moved (a slow stall), arm a profile of the next step."""
        run = (snap["project"], snap["experiment_name"])
        verdict = snap.get("verdict") or {}
        if verdict.get("class") in HANG_CLASSES:
            self.conditions.mark_hung(run, verdict.get("sentence", ""))
        if snap.get("origin") != "auto":
            return
        with self._lock:
            ep = self._episodes.get(run)
        moved = snap.get("moved")
        confirming = ep is not None and len(ep["snapshots"]) >= 2 and snap["id"] == ep["snapshots"][1]
        if ep is None or not confirming or not moved:
            return
        if moved["still_count"] and not moved["moved_count"]:
            if verdict.get("class") in HANG_CLASSES:
                return  # the verdict said more than "nobody moved"
            self.conditions.mark_hung(run, f"nobody moved in the {moved.get('seconds', 0):.0f} s between two stack "
                                           f"snapshots: {snap.get('summary', '')}")
            return
        if self.profiles is None or not moved["moved_count"]:
            return
        first = self.clock.first_step_starting_after(*run, time.time() + CLIENT_HEARTBEAT_S + 1.0)
        if first is None:
            return
        try:
            self.profiles.create(*run, first, first, lanes=ep["lanes"], origin="auto")
            self.profiled += 1
        except RLInsightError as exc:
            log.info("no automatic profile of %s/%s: %s", *run, exc)

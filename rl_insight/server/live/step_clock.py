"""Each run's step clock as its clients' samples tell it: the last step metric value, when it moved, and a
short history, so that "which step was running at time t" can be answered for data that carries no step
(OTLP spans from MLflow, whose trace tags are lost on export) and profile requests can say "next".

verl logs `training/global_step` N at the end of step N, so the clock reads the last *completed* step;
the step in progress at time t is one more than the clock's value at t.

The clock is the live view; the stored fact is the run store's step marks (runstore/step_marks.py), from which a
run this server has not seen yet — after a restart, or one another server of a fleet heard first — is seeded
(`seed`, `stored_steps`), moving forward by the same rule (never back).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from typing import Any, Callable

from ...semantics.names import sanitize_metric_name

MAX_RUNS = 10_000
HISTORY = 4096  # clock moves kept per run (at one step a minute, almost three days)


class StepClock:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], deque[tuple[float, int]]] = {}
        self._moved: set[tuple[str, str]] = set()  # runs whose clock moved on this server (one per run in _runs)
        # called with (project, experiment_name, step, at) when a run's clock first moves on this server (from its
        # seed or from nothing), so data that arrived before it (and could not be given a step) can be given one (the
        # run store's trajectories)
        self.on_first_move: list[Callable[[str, str, int, float], None]] = []
        # a run first seen here may have a history in the run store (this server's before a restart, or another's of
        # a fleet): (client time, step) in time order (`stored_steps`); None: a run starts with what arrives here
        self.seed: Callable[[str, str], list[tuple[float, float]]] | None = None

    def note(
        self, project: str | None, experiment_name: str | None, step: float | None, now: float | None = None
    ) -> None:
        """A sample carried `step`: the clock moves forward (never back: a late sample of an older step)."""
        if not project or not experiment_name or step is None or not (0 <= step <= 2**53):
            return
        key, value = (project, experiment_name), int(step)
        first = False
        seeding = self.seed is not None and key not in self._runs and len(self._runs) < MAX_RUNS
        history = self._seed(key) if seeding else []
        with self._lock:
            hist = self._runs.get(key)
            if hist is None:
                if len(self._runs) >= MAX_RUNS:
                    return
                hist = self._runs[key] = deque(maxlen=HISTORY)
                for at_s, v in history:
                    if not hist or int(v) > hist[-1][1]:
                        hist.append((max(at_s, hist[-1][0]) if hist else at_s, int(v)))
            if not hist or value > hist[-1][1]:
                at = time.time() if now is None else now
                # (its first move here, seeded or not: what arrived here before it could not be given a step)
                first = key not in self._moved
                self._moved.add(key)
                hist.append(
                    (max(at, hist[-1][0]) if hist else at, value)
                )  # kept in time order (clients' clocks differ)
        if first:
            for listener in self.on_first_move:
                try:
                    listener(project, experiment_name, value, at)
                except Exception:  # a listener never stops the clock
                    pass

    def note_steps(self, project: str | None, experiment_name: str | None,
                   stepped: list[tuple[float, float]]) -> None:
        """A batch's (step, client time) pairs: the clock moves to the largest step, at the earliest time a sample of
        it was logged (never in the server's future), so spans timed by the same cluster's clocks fall in the right
        step. Every batch (the client's, OTLP metrics) moves the clock here, by this one rule."""
        if not stepped:
            return
        top = max(step for step, _ in stepped)
        self.note(project, experiment_name, top, min(min(ts for step, ts in stepped if step == top), time.time()))

    def _seed(self, key: tuple[str, str]) -> list[tuple[float, float]]:
        try:
            return self.seed(*key) if self.seed is not None else []
        except Exception:  # the store is away: the clock starts from what arrives
            return []

    def current(self, project: str, experiment_name: str) -> tuple[int, float] | None:
        """(last completed step, when its client logged it), or None before the run's first step metric."""
        hist = self._runs.get((project, experiment_name))
        if not hist:
            return None
        at, step = hist[-1]
        return step, at

    def first_step_starting_after(
        self, project: str, experiment_name: str, t: float, now: float | None = None
    ) -> int | None:
        """The first step expected to begin at or after time t (epoch s), at the run's pace (the median of its
        last steps' durations); the step after the one in progress when the pace is not known yet. None before
        the run's first step metric. A step in progress longer than the pace (a stalled or finished run) is
        taken to end `now`, not to have ended when the pace said. ("Profile the next step" asks for the first
        step every process will have heard of before it begins: a process idle between phases hears only at
        its next batch or heartbeat.)"""
        hist = self._runs.get((project, experiment_name))
        if not hist:
            return None
        with self._lock:
            recent = list(hist)[-9:]
        at, step = recent[-1]
        first = step + 2  # step+1 is in progress
        gaps = sorted((b[0] - a[0]) / max(1, b[1] - a[1]) for a, b in zip(recent, recent[1:]))
        pace = gaps[len(gaps) // 2] if gaps else 0.0
        if pace <= 0:
            return first
        # step k (k >= step + 2) begins when step k-1 is logged: the one in progress ends at at + pace (or now,
        # if that has passed), and each after it takes a pace
        ends = max(at + pace, time.time() if now is None else now)
        ahead = max(0.0, t - ends) / pace
        return first + int(-(-ahead // 1))

    def step_at(self, project: str, experiment_name: str, t: float) -> int | None:
        """The step in progress at time t (epoch s): one past the clock's value then. Before the first move the
        clock remembers it is the step that move completed, while the history is whole (a run's first step logs
        its metric only at its end); None once older moves were forgotten."""
        hist = self._runs.get((project, experiment_name))
        if not hist:
            return None
        with self._lock:
            times = [at for at, _ in hist]
            i = bisect.bisect_right(times, t) - 1
            if i < 0:
                return hist[0][1] if len(hist) < HISTORY else None
            return hist[i][1] + 1

    def value_at(self, project: str, experiment_name: str, t: float) -> int | None:
        """The clock's value at time t (epoch s): the last step completed by then, as a client stamps its samples
        (None before the run's first step metric, or once that far back was forgotten)."""
        hist = self._runs.get((project, experiment_name))
        if not hist:
            return None
        with self._lock:
            i = bisect.bisect_right([at for at, _ in hist], t) - 1
            return hist[i][1] if i >= 0 else None

    def reached_at(self, project: str, experiment_name: str, step: int) -> float | None:
        """When the clock first said `step` or more (step `step` ended), as far as its history remembers; None while
        it has not."""
        hist = self._runs.get((project, experiment_name))
        if not hist:
            return None
        with self._lock:
            return next((at for at, value in hist if value >= step), None)

    def forget(self, keys: set[tuple[str, str]]) -> None:
        with self._lock:
            for k in keys:
                self._runs.pop(k, None)
                self._moved.discard(k)


def stored_steps(reader: Any, step_metric: str) -> Callable[[str, str], list[tuple[float, float]]]:
    """A clock's `seed`: a run's stored step marks (time, step) through the run store's reader."""
    name = sanitize_metric_name(step_metric)

    def seed(project: str, experiment_name: str) -> list[tuple[float, float]]:
        run_id = reader.runs.find_id(project, experiment_name)
        return [] if run_id is None else [(ts, float(step)) for ts, step in reader.steps.marks(run_id, name)]

    return seed

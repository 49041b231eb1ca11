"""A per-process span budget per step (`RL_INSIGHT_SPAN_BUDGET`, or `client.span_budget` in the init config), for
jobs of thousands of processes: agent-loop turn detail is what grows with the rollout (a turn span per model and
tool call), so that is what the budget bounds.

Invariants: RL state lanes (`trace_state`) and the session records (`agent_session`, with every trajectory's
reward, turns and status) are always kept, so the timeline, the insights and the trajectory counts stay exact. Turn
spans are kept or left out by whole trajectories (never half of one): a trajectory's first turn decides, while the
step's budget has room, and its later turns follow even past it. What is left out is counted (turns and
trajectories) and reported with the client's self-metrics.

The step a turn counts against: its `global_steps` attribute; without one, the process's current step (its step
metric, else the run's step clock from the replies); without any step at all, a window of WINDOW_S seconds. So a
job that never tags its turns with a step still gets a fresh budget every round. A trajectory's decision lasts while
it does: until its session's `agent_session` record, or — with a known step — until the step moves on; a job that
numbers its samples and trajectories the same way every round (the same lanes) is decided afresh each round, never
held to its first round's decisions.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

TURN_SOURCES = ("gateway", "tool")  # `monitor.trace_source` of turn detail (agent_loop.py's and the runtimes')
MAX_DECISIONS = 200_000  # trajectories remembered (oldest forgotten first)
WINDOW_S = 60.0  # a budget window when no step is known at all


class SpanBudget:
    __slots__ = ("per_step", "step_now", "_kept", "_decided", "_sessions", "turns_out", "trajectories_out")

    def __init__(self, per_step: int, step_now: Callable[[], Any] | None = None) -> None:
        self.per_step = per_step
        self.step_now = step_now  # the process's current step, or None when it knows none
        self._kept: dict[Any, int] = {}  # step -> turn spans kept in it
        self._decided: dict[str, tuple[Any, bool]] = {}  # trajectory lane -> (the step it was decided in, kept)
        self._sessions: dict[str, set[str]] = {}  # session lane prefix -> its trajectories' lanes decided
        self.turns_out = 0
        self.trajectories_out = 0

    def keep(self, attrs: dict) -> bool:
        """Whether this span goes out (anything but turn detail always does). Called on the training thread: a few
        dict operations."""
        source = attrs.get("monitor.trace_source")
        if source not in TURN_SOURCES:
            if source == "session":  # the session is over: its trajectories' lanes may come again, decided afresh
                for lane in self._sessions.pop(_session_of(str(attrs.get("state_lane_id", ""))), ()):
                    self._decided.pop(lane, None)
            return True
        traj = str(attrs.get("state_lane_id", ""))
        step = self._step_of(attrs)
        held = self._decided.get(traj)
        # a decision holds for the trajectory's life: a known step that moved on ends it (a window does not: a
        # trajectory may cross one; its session's end does)
        decided = held[1] if held is not None and (held[0] == step or isinstance(step, tuple)) else None
        if decided is None:
            decided = self._decide(traj, step)
        if decided:
            self._kept[step] = self._kept.get(step, 0) + 1
            return True
        self.turns_out += 1
        return False


    def _step_of(self, attrs: dict) -> Any:
        """The span's step: its own, else the process's, else the time window it falls in."""
        step = attrs.get("global_steps")
        if step is None:
            step = self.step_now() if self.step_now is not None else None
        return step if step is not None else ("window", int(time.monotonic() // WINDOW_S))

    def _decide(self, traj: str, step: Any) -> bool:
        """Whether a trajectory first heard at `step` goes out (while the step's budget lasts), remembered bounded."""
        decided = self._kept.get(step, 0) < self.per_step
        if len(self._decided) >= MAX_DECISIONS:
            del self._decided[next(iter(self._decided))]
        self._decided[traj] = (step, decided)
        if len(self._sessions) >= MAX_DECISIONS:
            del self._sessions[next(iter(self._sessions))]
        self._sessions.setdefault(_session_of(traj), set()).add(traj)
        if not decided:
            self.trajectories_out += 1
        if len(self._kept) > 64:  # old steps' counts
            del self._kept[next(iter(self._kept))]
        return decided


def _session_of(lane: str) -> str:
    """A trajectory's (or its session record's) lane without the trajectory: `experiment=…/sample=…/session=…`."""
    return lane.rsplit("/traj=", 1)[0]


def budget_from(value: Any, step_now: Callable[[], Any] | None = None) -> SpanBudget | None:
    """The budget a setting asks for (a positive integer), else None (no budget); `step_now` as SpanBudget takes."""
    try:
        n = int(value) if value not in (None, "") else 0
    except (TypeError, ValueError):
        return None
    return SpanBudget(n, step_now) if n > 0 else None

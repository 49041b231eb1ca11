"""The reply's `RunControl`, built in one place: every open control request of the run (profiles, stack snapshots)
and the run's step clock, for every ingest reply to one of the run's processes.

Invariant: each kind of control request is one source with `open_requests(project, experiment_name)`, listed here
once; a list it gives is authoritative (a request missing from it is cancelled or over). A reply of a process that
names no run carries an empty profile list and nothing else.
"""

from __future__ import annotations

from typing import Any, Protocol

from ...protocol import RunControl
from ..live.step_clock import StepClock


class ControlSource(Protocol):
    def open_requests(self, project: str | None, experiment_name: str | None) -> list[Any]: ...


class RunControlBuilder:
    def __init__(self, clock: StepClock, profiles: ControlSource, stacks: ControlSource | None = None) -> None:
        self.clock, self.profiles, self.stacks = clock, profiles, stacks

    def for_client(self, project: str | None, experiment_name: str | None) -> RunControl:
        """What rides on an ingest reply of the run: its open requests of every kind and its step clock (for
        processes that do not log the step themselves)."""
        if not project or not experiment_name:
            return RunControl([])
        stacks = self.stacks.open_requests(project, experiment_name) if self.stacks is not None else []
        profiles = self.profiles.open_requests(project, experiment_name)
        clock = self.clock.current(project, experiment_name)
        if clock is None:
            return RunControl(profiles, stacks=stacks)
        # and when it moved: a process can tell whether a step began before it heard
        return RunControl(profiles, *clock, stacks=stacks)

"""The reply's `RunControl`, built in one place: every open control request of the run (each kind of
protocol.reply.CONTROL_KINDS from its book) and the run's step clock, for every ingest reply to one of its processes.

Invariant: each kind of control request is one source with `open_requests(project, experiment_name)`, registered
here once under its reply key by the room that keeps it (`add`; a key of no kind, or one registered twice, is
refused); a list it gives is authoritative (a request missing from it is cancelled or over).
A reply of a process that names no run carries an empty list of each kind and nothing else.
"""

from __future__ import annotations

from typing import Any, Protocol

from ...protocol import RunControl
from ...protocol.reply import CONTROL_KINDS
from ..live.step_clock import StepClock


class ControlSource(Protocol):
    def open_requests(self, project: str | None, experiment_name: str | None) -> list[Any]: ...


class RunControlBuilder:
    def __init__(self, clock: StepClock) -> None:
        self.clock = clock
        self.sources: dict[str, ControlSource] = {}

    def add(self, key: str, source: ControlSource) -> None:
        """`source`: the book of one kind of request, by its key in the reply (`profile`, `stacks`); a key no kind of
        protocol.reply.CONTROL_KINDS has is refused (its requests would reach no client), and so is a second book of
        one kind."""
        if key not in {kind.key for kind in CONTROL_KINDS}:
            raise ValueError(f"a control source of no kind of request: {key!r} (protocol/reply.py CONTROL_KINDS)")
        if key in self.sources:
            raise ValueError(f"the control requests of kind {key!r} already have their book")
        self.sources[key] = source

    def missing(self) -> list[str]:
        """The kinds of request no book was added for (their requests would never reach a client)."""
        return sorted({kind.key for kind in CONTROL_KINDS} - set(self.sources))

    def for_client(self, project: str | None, experiment_name: str | None) -> RunControl:
        """What rides on an ingest reply of the run: its open requests of every kind and its step clock (for
        processes that do not log the step themselves)."""
        if not project or not experiment_name:
            return RunControl(requests={key: [] for key in self.sources})
        requests: dict[str, list[Any] | None] = {key: source.open_requests(project, experiment_name)
                                                 for key, source in self.sources.items()}
        clock = self.clock.current(project, experiment_name)
        if clock is None:
            return RunControl(requests=requests)
        # and when it moved: a process can tell whether a step began before it heard
        return RunControl(None, *clock, requests=requests)

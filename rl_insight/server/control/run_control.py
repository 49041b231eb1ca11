"""The reply's `RunControl`, built in one place: every open control request of the run (each kind of
protocol.reply.CONTROL_KINDS from its book) and the run's step clock, for every ingest reply to one of its processes.

Invariant: each kind of control request is one source with `open_requests(project, experiment_name)`, registered
here once under its reply key; a list it gives is authoritative (a request missing from it is cancelled or over).
A reply of a process that names no run carries an empty list of each kind and nothing else.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from ...protocol import RunControl
from ...protocol.reply import CONTROL_KINDS
from ..live.step_clock import StepClock


class ControlSource(Protocol):
    def open_requests(self, project: str | None, experiment_name: str | None) -> list[Any]: ...


class RunControlBuilder:
    def __init__(self, clock: StepClock, sources: Mapping[str, ControlSource]) -> None:
        """`sources`: each kind's book by its key in the reply (`profile`, `stacks`); a key no kind of
        protocol.reply.CONTROL_KINDS has is refused (its requests would reach no client)."""
        unknown = set(sources) - {kind.key for kind in CONTROL_KINDS}
        if unknown:
            raise ValueError(f"control sources of no kind of request: {sorted(unknown)} (protocol/reply.py "
                             "CONTROL_KINDS)")
        self.clock = clock
        self.sources = dict(sources)

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

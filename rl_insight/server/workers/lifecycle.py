"""The server's parts that run (threads, loops, a child process) or hold something to close, started in the order
they were added and stopped in the reverse order.

Invariant: the order is written once, where AppState and the rooms add their parts; a part is stopped only if its
start ran (or it has no start); one part failing to stop is logged and the others still stop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger("rl_insight.server")


@dataclass(frozen=True)
class Part:
    name: str
    start: Callable[[], Any] | None  # (what it returns is not used)
    stop: Callable[[], Any] | None


class Lifecycle:
    def __init__(self) -> None:
        self.parts: list[Part] = []
        self._started: list[Part] = []

    def add(self, name: str, start: Callable[[], Any] | None = None, stop: Callable[[], Any] | None = None, *,
            before: str | None = None) -> None:
        """`before`: the part this one goes ahead of (so it stops after that one: a room's final work after a kernel
        part's last round); a name no part has is refused."""
        part = Part(name, start, stop)
        if before is None:
            self.parts.append(part)
            return
        at = next((i for i, p in enumerate(self.parts) if p.name == before), None)
        if at is None:
            raise ValueError(f"no part {before!r} to add {name!r} before")
        self.parts.insert(at, part)

    def start(self) -> None:
        for part in self.parts:
            if part.start is not None:
                part.start()
            self._started.append(part)

    def stop(self) -> None:
        while self._started:
            part = self._started.pop()
            if part.stop is None:
                continue
            try:
                part.stop()
            except Exception as exc:  # shutdown goes on: the parts after it still drain and close
                log.warning("stopping %s failed: %s", part.name, exc)

"""The server's parts that run (threads, loops, a child process) or hold something to close, started in the order
they were added and stopped in the reverse order.

Invariant: the order is written once, where AppState adds its parts; a part is stopped only if its start ran (or it
has no start); one part failing to stop is logged and the others still stop.
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

    def add(self, name: str, start: Callable[[], Any] | None = None, stop: Callable[[], Any] | None = None) -> None:
        self.parts.append(Part(name, start, stop))

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

"""Span sink: open states and recently finished spans, in memory.

The persistent run store (SQLite) and OTLP forwarding replace/extend this sink; the ingest path
only depends on `SpanSink.add_starts` / `add_spans`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from typing import Any, Protocol


class SpanSink(Protocol):
    def add_starts(self, starts: list[dict[str, Any]]) -> None: ...
    def add_spans(self, spans: list[dict[str, Any]]) -> None: ...


class MemorySpanSink:
    """Bounded: at most `max_open` open states (oldest forgotten first) and `max_recent` spans."""

    def __init__(self, max_open: int = 100_000, max_recent: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._recent: deque[dict[str, Any]] = deque(maxlen=max_recent)
        self._max_open = max_open
        self.finished_total = 0

    def add_starts(self, starts: list[dict[str, Any]]) -> None:
        with self._lock:
            for s in starts:
                self._open[s["id"]] = s
                while len(self._open) > self._max_open:
                    self._open.popitem(last=False)

    def add_spans(self, spans: list[dict[str, Any]]) -> None:
        with self._lock:
            for s in spans:
                self._open.pop(s["id"], None)
                self._recent.append(s)
            self.finished_total += len(spans)

    def open_states(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._open.values())

    def recent(self, limit: int) -> list[dict[str, Any]]:
        with self._lock:
            items = list(self._recent)
        return items[-limit:] if limit else []

    def open_count(self) -> int:
        with self._lock:
            return len(self._open)
